"""Replies a well-behaved server never sends, from a server that sends them on purpose.

The lab's SDK server has a hostile layer (a `ServerMiddleware`, outside mcpcache's own revalidation) that
rewrites every `tools/call` result on the wire. Each test asserts exactly what the caller got: a
not-modified reply the client cannot match is never returned as a result (the call is repeated without a
tag, and a server that insists gets an error result saying so), and a malformed cache block is read
tolerantly, never as an exception and never as a reason to serve something wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fastmcp
import pytest
from support.transports import ERAS, MODERN, Era, ServerTarget

from mcpcache.client import ToolCache
from mcpcache.protocol import MAX_TTL_MS, META_KEY, NOT_MODIFIED_KEY

from .harness import VIEW_KINDS, Conn, FakeClock, ViewKind, assert_full_answer, block, connect, plain
from .lab import Lab, Rewrite, build_lab

pytestmark = pytest.mark.anyio

KEY = {"key": "k"}
OTHER_TAG = 'W/"00000000000000000000000000000000"'


def sent_tag(meta: dict[str, Any] | None) -> bool:
    return isinstance(meta, dict) and isinstance(meta.get(META_KEY), dict) and "etag" in meta[META_KEY]


def not_modified(result: dict[str, Any], **block_changes: Any) -> dict[str, Any]:
    """A not-modified reply made from a full answer, with its cache block changed as given."""
    meta = result.get("_meta") or {}
    stamped = dict(meta.get(META_KEY) or {"ttlMs": 5000, "cacheScope": "private"})
    stamped[NOT_MODIFIED_KEY] = True
    stamped.update(block_changes)
    stamped = {k: v for k, v in stamped.items() if v is not None}
    return {
        **result,  # resultType and the like, on 2026-07-28
        "content": [],
        "structuredContent": {"kind": "doc"},
        "isError": False,
        "_meta": {**meta, META_KEY: stamped},
    }


def when_tagged(make: Callable[[dict[str, Any]], dict[str, Any]]) -> Rewrite:
    """Misbehave only on conditional calls; answer ordinary calls honestly."""
    return lambda result, meta: make(result) if sent_tag(meta) else result


def always(make: Callable[[dict[str, Any]], dict[str, Any]]) -> Rewrite:
    return lambda result, meta: make(result)


async def stored_then_stale(conn: Conn, lab: Lab, clock: FakeClock) -> dict[str, Any]:
    """Store an honest answer, let it go stale; returns its plain form."""
    first = await conn.call("read", KEY)
    assert first.outcome.stored
    clock.advance(6)
    return plain(first.result)


# -- not-modified replies the client cannot match -------------------------------------------------

UNMATCHED: dict[str, Rewrite] = {
    "another tag": when_tagged(lambda r: not_modified(r, etag=OTHER_TAG)),
    "no tag in the reply": when_tagged(lambda r: not_modified(r, etag=None)),
    "a malformed tag in the reply": when_tagged(lambda r: not_modified(r, etag="not a tag")),
    "marked as an error": when_tagged(lambda r: {**not_modified(r), "isError": True}),
    "the tag with trailing junk": when_tagged(lambda r: not_modified(r, etag=r["_meta"][META_KEY]["etag"] + " ")),
}


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
@pytest.mark.parametrize("case", list(UNMATCHED))
async def test_an_unmatched_not_modified_reply_is_asked_again_without_a_tag(
    case: str, view_kind: ViewKind, era: Era, clock: FakeClock, cache: ToolCache
) -> None:
    lab = Lab()
    async with connect(view_kind, ServerTarget.memory(build_lab("sdk", lab)), era, cache) as conn:
        honest = await stored_then_stale(conn, lab, clock)
        lab.docs.write("k", "k: second edition")
        lab.rewrite = UNMATCHED[case]
        lab.seen_meta.clear()
        mark = conn.mark()
        call = await conn.call("read", KEY)
        assert conn.tool_calls(mark) == 2
        assert [sent_tag(meta) for meta in lab.seen_meta] == [True, False]

    # The repeat got the honest full answer: the new edition, stored in place of the old one.
    assert_full_answer(call.result)
    assert not call.result.is_error
    assert call.result.structured_content["text"] == "k: second edition"  # type: ignore[index]
    assert plain(call.result) != honest
    assert (call.outcome.status, call.outcome.stored) == ("miss", True)


async def test_the_tag_in_strong_form_matches_weakly(clock: FakeClock, cache: ToolCache) -> None:
    # Weak comparison (RFC 9110 8.8.3.2) ignores W/: the same opaque tag confirms the stored copy.
    lab = Lab()
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        honest = await stored_then_stale(conn, lab, clock)
        lab.rewrite = when_tagged(lambda r: not_modified(r, etag=r["_meta"][META_KEY]["etag"].removeprefix("W/")))
        mark = conn.mark()
        call = await conn.call("read", KEY)
        assert conn.tool_calls(mark) == 1
    assert call.outcome.status == "revalidated"
    assert plain(call.result) == honest


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
@pytest.mark.parametrize("with_entry", [False, True], ids=["no entry", "stale entry"])
async def test_a_server_that_only_says_not_modified_gets_an_error_result(
    with_entry: bool, view_kind: ViewKind, era: Era, clock: FakeClock, cache: ToolCache
) -> None:
    lab = Lab()
    async with connect(view_kind, ServerTarget.memory(build_lab("sdk", lab)), era, cache) as conn:
        if with_entry:
            await stored_then_stale(conn, lab, clock)
        lab.rewrite = always(lambda r: not_modified(r, etag=OTHER_TAG))
        lab.seen_meta.clear()
        mark = conn.mark()
        call = await conn.call("read", KEY)
        assert [sent_tag(meta) for meta in lab.seen_meta] == [with_entry, False]
        assert conn.tool_calls(mark) == 2
        if view_kind == "fastmcp":
            # FastMCP's own call_tool raises on an error result, as it would for any tool error.
            with pytest.raises(fastmcp.exceptions.ToolError, match="not modified"):
                await conn.view.call_tool("read", KEY)

    assert call.result.is_error
    assert "not modified" in call.result.content[0].text  # type: ignore[union-attr]
    assert call.result.structured_content is None, "never the stub's {'kind': ...}"
    assert block(call.result) is None
    assert (call.outcome.status, call.outcome.stored) == ("miss", False)

    # Nothing was stored from it: an honest server is asked again.
    lab.rewrite = None
    again = await _call_once_more(view_kind, lab, era, cache)
    assert not again.result.is_error
    assert again.result.structured_content["text"] == "k: first edition"  # type: ignore[index]


@pytest.mark.parametrize("mode", ["bypass", "refresh"])
async def test_other_modes_never_return_the_stub_either(mode: str, clock: FakeClock, cache: ToolCache) -> None:
    lab = Lab(rewrite=always(lambda r: not_modified(r)))
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        call = await conn.call("read", KEY, cache_mode=mode)
    assert [sent_tag(meta) for meta in lab.seen_meta] == [False, False]
    assert call.result.is_error
    assert (call.outcome.status, call.outcome.stored) == ("bypass" if mode == "bypass" else "miss", False)


async def _call_once_more(view_kind: ViewKind, lab: Lab, era: Era, cache: ToolCache) -> Any:
    async with connect(view_kind, ServerTarget.memory(build_lab("sdk", lab)), era, cache) as conn:
        return await conn.call("read", KEY)


async def test_a_not_modified_reply_to_an_ordinary_call_is_never_a_result(cache: ToolCache) -> None:
    # No entry, no tag sent, and a server that answers the first call not-modified and then behaves.
    lab = Lab()
    replies = iter([lambda r: not_modified(r), lambda r: r])
    lab.rewrite = lambda result, meta: next(replies)(result)
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        call = await conn.call("read", KEY)
    assert [sent_tag(meta) for meta in lab.seen_meta] == [False, False]
    assert_full_answer(call.result)
    assert call.result.structured_content["text"] == "k: first edition"  # type: ignore[index]
    assert (call.outcome.status, call.outcome.stored) == ("miss", True)


# -- malformed cache blocks on full answers -------------------------------------------------------


def with_block(**fields: Any) -> Rewrite:
    def rewrite(result: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
        if result.get("isError"):
            return result
        current = dict((result.get("_meta") or {}).get(META_KEY) or {})
        current.update(fields)
        current = {k: v for k, v in current.items() if v is not None}
        return {**result, "_meta": {**(result.get("_meta") or {}), META_KEY: current}}

    return rewrite


def meta_replaced(value: Any) -> Rewrite:
    return lambda result, meta: {**result, "_meta": value}


@pytest.mark.parametrize(
    ("ttl", "fresh_for_s"),
    [(-5, 0), ("5000", 0), (True, 0), (2.5, 0), (7000.0, 7), (1e30, MAX_TTL_MS / 1000)],
    ids=["negative", "a string", "a bool", "a fraction", "a whole float", "1e30 (clamped to 24 h)"],
)
async def test_a_malformed_ttl_reads_safely(ttl: Any, fresh_for_s: float, clock: FakeClock, cache: ToolCache) -> None:
    lab = Lab(rewrite=with_block(ttlMs=ttl))
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        first = await conn.call("read", KEY)
        assert first.result.meta[META_KEY]["ttlMs"] == ttl  # type: ignore[index]  # what the caller got, as sent
        assert first.outcome.stored
        if fresh_for_s:
            clock.advance(fresh_for_s - 1)
            assert (await conn.call("read", KEY)).outcome.status == "fresh_hit"
            clock.advance(1)
        mark = conn.mark()
        stale = await conn.call("read", KEY)
        assert stale.outcome.status == "revalidated", stale.outcome
        assert conn.tool_calls(mark) == 1
        assert plain(stale.result) == plain(first.result)
    assert lab.runs("read", "k") == 2


BLOCKS: dict[str, tuple[Rewrite, bool, bool]] = {
    # name: (rewrite, stored, a later stale read sends the tag)
    "an unknown scope": (with_block(cacheScope="session"), True, True),
    "a scope that is not a string": (with_block(cacheScope=["public"]), True, True),
    "a malformed tag and a ttl": (with_block(etag='W/"has a space"'), True, False),
    "a tag too long to be ours": (with_block(etag='W/"' + "a" * 300 + '"'), True, False),
    "a malformed tag and no ttl": (with_block(etag="bare", ttlMs=None), False, False),
    "a block that is not an object": (meta_replaced({META_KEY: "cache me"}), False, False),
    "a block under another key": (meta_replaced({"io.example/cache": {"ttlMs": 5000}}), False, False),
    "an empty block": (meta_replaced({META_KEY: {}}), False, False),
}


@pytest.mark.parametrize("case", list(BLOCKS))
async def test_a_malformed_block_on_a_full_answer(case: str, clock: FakeClock, cache: ToolCache) -> None:
    rewrite, stored, revalidates = BLOCKS[case]
    lab = Lab(rewrite=rewrite)
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        first = await conn.call("read", KEY)
        assert not first.result.is_error
        assert first.result.structured_content["text"] == "k: first edition"  # type: ignore[index]
        assert first.outcome.stored is stored
        clock.advance(6)
        lab.seen_meta.clear()
        second = await conn.call("read", KEY)
    assert [sent_tag(meta) for meta in lab.seen_meta] == [revalidates]
    assert second.outcome.status == ("revalidated" if revalidates else "miss")
    assert plain(second.result) == plain(first.result)


@pytest.mark.parametrize("claim", ["yes", 1, "false", {}], ids=repr)
async def test_a_not_modified_claim_in_any_form_is_a_claim(claim: Any, clock: FakeClock, cache: ToolCache) -> None:
    # Read as false, such a reply would be stored and returned as the answer: its empty stub.
    lab = Lab()
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        honest = await stored_then_stale(conn, lab, clock)
        lab.rewrite = when_tagged(lambda r: not_modified(r, notModified=claim))
        mark = conn.mark()
        matched = await conn.call("read", KEY)
        assert conn.tool_calls(mark) == 1
        assert matched.outcome.status == "revalidated"
        assert plain(matched.result) == honest

        # The same claim on every reply, ordinary calls included: never a result, never stored.
        lab.rewrite = always(lambda r: not_modified(r, notModified=claim))
        mark = conn.mark()
        refused = await conn.call("read", {"key": "other"})
        assert conn.tool_calls(mark) == 2
    assert refused.result.is_error
    assert refused.result.structured_content is None
    assert not refused.outcome.stored


@pytest.mark.parametrize("value", ["not an object", [1, 2], 7], ids=["a string", "a list", "a number"])
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_meta_that_is_not_an_object_fails_as_it_does_for_a_stock_client(
    value: Any, view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    lab = Lab()
    async with connect(view_kind, ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        stored = await stored_then_stale(conn, lab, clock)
        lab.rewrite = meta_replaced(value)
        # The SDK refuses the message before any cache sees it; the cache adds nothing and hides nothing.
        with pytest.raises(Exception, match="valid dictionary") as stock:
            await conn.direct("read", KEY)
        with pytest.raises(type(stock.value), match="valid dictionary"):
            await conn.call("read", KEY)
        lab.rewrite = None
        after = await conn.call("read", KEY)
    assert after.outcome.status == "revalidated", "the stored entry survived the bad reply"
    assert plain(after.result) == stored


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_cache_block_on_an_error_is_never_stored(
    view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    def error_with_block(result: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
        return {
            **{k: v for k, v in result.items() if k != "structuredContent"},
            "content": [{"type": "text", "text": "refused"}],
            "isError": True,
            "_meta": {META_KEY: {"ttlMs": 60000, "cacheScope": "public", "etag": OTHER_TAG}},
        }

    lab = Lab()
    async with connect(view_kind, ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        stored = await stored_then_stale(conn, lab, clock)
        lab.rewrite = error_with_block
        for _ in range(2):
            refused = await conn.call("read", KEY)
            assert refused.result.is_error
            assert refused.result.content[0].text == "refused"  # type: ignore[union-attr]
            assert (refused.outcome.status, refused.outcome.stored) == ("miss", False)
        fresh = await conn.call("read", {"key": "new"})
        assert fresh.result.is_error
        assert not fresh.outcome.stored
        lab.rewrite = None
        after = await conn.call("read", KEY)
        new = await conn.call("read", {"key": "new"})
    # The old entry was kept (an error confirms nothing, and replaces nothing).
    assert after.outcome.status == "revalidated"
    assert plain(after.result) == stored
    assert new.outcome.status == "miss"


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_full_answer_to_a_conditional_call_is_validated_like_any_answer(
    view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    def without_structured(result: dict[str, Any]) -> dict[str, Any]:
        # A changed answer that breaks the tool's output schema (it declares one; this carries none).
        broken = {k: v for k, v in result.items() if k != "structuredContent"}
        meta = dict(broken.get("_meta") or {})
        meta[META_KEY] = {"ttlMs": 5000, "cacheScope": "private", "etag": OTHER_TAG}
        return {**broken, "content": [{"type": "text", "text": "changed"}], "_meta": meta}

    lab = Lab()
    async with connect(view_kind, ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        stored = await stored_then_stale(conn, lab, clock)
        lab.rewrite = always(without_structured)
        with pytest.raises(RuntimeError, match="did not return structured content") as stock:
            await conn.direct("read", KEY)
        with pytest.raises(type(stock.value), match="did not return structured content"):
            await conn.call("read", KEY)
        lab.rewrite = None
        after = await conn.call("read", KEY)
    # What failed validation was not stored in place of the entry.
    assert after.outcome.status == "revalidated"
    assert plain(after.result) == stored


# -- not-modified stubs of every JSON shape ---------------------------------------------------------

STUB_SHAPES: dict[str, Any] = {"a list": ["doc"], "a string": "doc", "a number": 7, "null": None}
"""`structuredContent` on a not-modified reply as a careless or hostile server may send it. On 2025-11-25 a
tool result's structuredContent must be an object, so a client of that era cannot even parse such a reply."""


def stub_of(shape: Any) -> Rewrite:
    def rewrite(result: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
        if not sent_tag(meta):
            return result
        reply = not_modified(result, etag=result["_meta"][META_KEY]["etag"])
        if shape is None:
            del reply["structuredContent"]
        else:
            reply["structuredContent"] = shape
        return reply

    return rewrite


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
@pytest.mark.parametrize("shape", list(STUB_SHAPES))
async def test_a_not_modified_stub_of_any_shape_serves_the_stored_answer_or_asks_again(
    shape: str, view_kind: ViewKind, era: Era, clock: FakeClock, cache: ToolCache
) -> None:
    lab = Lab()
    async with connect(view_kind, ServerTarget.memory(build_lab("sdk", lab)), era, cache) as conn:
        honest = await stored_then_stale(conn, lab, clock)
        lab.rewrite = stub_of(STUB_SHAPES[shape])
        lab.seen_meta.clear()
        call = await conn.call("read", KEY)
        tagged = [sent_tag(meta) for meta in lab.seen_meta]

    # The reply names the tag the cache sent, so the stored copy is current: served as revalidated where
    # the client can read the reply; where it cannot (a 2025-11-25 session cannot parse a non-object
    # structuredContent), the call is asked again without a tag and the whole answer comes back. Never
    # an exception, never the stub.
    assert_full_answer(call.result)
    assert not call.result.is_error
    assert plain(call.result)["structuredContent"] == honest["structuredContent"]
    if call.outcome.status == "revalidated":
        assert tagged == [True]
    else:
        assert tagged == [True, False]
        assert (call.outcome.status, call.outcome.stored) == ("miss", True)
