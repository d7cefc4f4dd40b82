"""The cache's main flows, through each wrapped client, against both kinds of server, in both eras.

Memory transports (real JSON-RPC over memory streams): the same flows over stdio and streamable HTTP are
in test_transports.py. Every test counts what reached the server twice: the `tools/call` requests the
connection put on the wire (the counting transport) and the tool bodies that ran (the catalogue's
`DocStore`). Time moves only through the injected clock.
"""

from __future__ import annotations

from typing import Any

import fastmcp
import mcp
import mcp_types as mt
import pytest
from fixture_servers.catalog import OWN_META_KEY, SERVER_KINDS, DocStore, ServerKind, build
from support.transports import ERAS, MODERN, Era, ServerTarget

from mcpcache.client import CachedCall, CacheStats, ToolCache
from mcpcache.etag import content_tag
from mcpcache.protocol import META_KEY, conditional_request_meta
from mcpcache.stores import MemoryStore

from .harness import VIEW_KINDS, FakeClock, ViewKind, assert_full_answer, block, connect, plain

pytestmark = pytest.mark.anyio

KEY = {"key": "k"}


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("server_kind", SERVER_KINDS)
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_fresh_stale_changed_and_failed(
    view_kind: ViewKind, server_kind: ServerKind, era: Era, clock: FakeClock, cache: ToolCache
) -> None:
    docs = DocStore()
    # A server that answers not-modified whatever the schema (doc_model's requires more than `kind`), as
    # mcpcache's own did: the flow of a revalidation (test_a_refused_stub_* below: a server that does not).
    server = build(server_kind, docs, stubs_checked=False)
    async with connect(view_kind, ServerTarget.memory(server), era, cache) as conn:
        first = await conn.call("doc_model", KEY)
        assert (first.outcome.status, first.outcome.stored) == ("miss", True)
        assert docs.runs_of("doc_model", "k") == 1
        etag = block(first.result)["etag"]  # type: ignore[index]

        # Fresh: served with nothing on the wire and no body run, as an equal but separate object.
        mark = conn.mark()
        hit = await conn.call("doc_model", KEY)
        assert hit.outcome.status == "fresh_hit"
        assert conn.tool_calls(mark) == 0
        assert docs.runs_of("doc_model", "k") == 1
        assert hit.result == first.result
        assert hit.result is not first.result

        # Stale with a tag: one conditional call, answered not-modified; the stored copy is served.
        clock.advance(5.001)
        mark = conn.mark()
        again = await conn.call("doc_model", KEY)
        assert again.outcome.status == "revalidated"
        assert conn.tool_calls(mark) == 1
        assert docs.runs_of("doc_model", "k") == 2  # no validator: the body runs, the bytes are saved
        assert plain(again.result) == plain(first.result)
        assert block(again.result) == {"ttlMs": 5000, "cacheScope": "public", "etag": etag}
        assert_full_answer(again.result)

        # The revalidation restarted its freshness.
        clock.advance(4.9)
        mark = conn.mark()
        assert (await conn.call("doc_model", KEY)).outcome.status == "fresh_hit"
        assert conn.tool_calls(mark) == 0

        # The server's answer changes: the full new answer replaces the entry.
        docs.write("k", "k: second edition")
        clock.advance(0.2)
        changed = await conn.call("doc_model", KEY)
        assert (changed.outcome.status, changed.outcome.stored) == ("miss", True)
        assert "replaced" in changed.outcome.reason
        assert changed.result.structured_content == {"kind": "doc.model", "key": "k", "text": "k: second edition"}
        new_etag = block(changed.result)["etag"]  # type: ignore[index]
        assert new_etag != etag
        assert new_etag == content_tag(changed.result.content, changed.result.structured_content)
        mark = conn.mark()
        served = await conn.call("doc_model", KEY)
        assert served.outcome.status == "fresh_hit"
        assert served.result.structured_content == changed.result.structured_content
        assert conn.tool_calls(mark) == 0

        # Errors are returned, never stored.
        for attempt in (1, 2):
            failed = await conn.call("fails", KEY)
            assert failed.result.is_error
            assert (failed.outcome.status, failed.outcome.stored) == ("miss", False)
            assert docs.runs_of("fails", "k") == attempt

    assert_stats_match(cache.stats, [first, hit, again, changed, served])


@pytest.mark.parametrize("server_kind", SERVER_KINDS)
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_refused_stub_gets_the_full_answer_which_the_cache_keeps_and_serves(
    view_kind: ViewKind, server_kind: ServerKind, clock: FakeClock, cache: ToolCache
) -> None:
    """doc_model's schema refuses {"kind": K}, so the server answers the stale entry's tag with the full
    answer under the same tag: the cache stores it (freshness restarted) and serves it; the stock view's
    own validation passes, as the answer is whole."""
    docs = DocStore()
    async with connect(view_kind, ServerTarget.memory(build(server_kind, docs)), MODERN, cache) as conn:
        mark = conn.mark()
        first = await conn.call("doc_model", KEY)
        _, whole = conn.log.exchange("tools/call", since=mark)
        etag = block(first.result)["etag"]  # type: ignore[index]
        clock.advance(5.001)
        mark = conn.mark()
        again = await conn.call("doc_model", KEY)
        assert conn.tool_calls(mark) == 1
        _, reply = conn.log.exchange("tools/call", since=mark)
        assert reply.nbytes >= whole.nbytes - 16, "the whole answer came back, not a not-modified reply"
        assert "revalidat" in again.outcome.reason, "the stale entry's tag went with the call"
        assert (again.outcome.status, again.outcome.stored) == ("miss", True)
        assert "same tag" in again.outcome.reason
        assert again.result.structured_content == first.result.structured_content
        assert block(again.result) == {"ttlMs": 5000, "cacheScope": "public", "etag": etag}
        assert_full_answer(again.result)
        assert docs.runs_of("doc_model", "k") == 2
        # Stored: fresh again, served with nothing on the wire.
        clock.advance(4.9)
        mark = conn.mark()
        hit = await conn.call("doc_model", KEY)
        assert hit.outcome.status == "fresh_hit"
        assert conn.tool_calls(mark) == 0
        assert hit.result.structured_content == first.result.structured_content
    assert cache.stats.revalidations == 0
    assert cache.stats.stored == 2


def assert_stats_match(stats: CacheStats, some_calls: list[CachedCall]) -> None:
    assert stats.calls >= len(some_calls)
    assert stats.calls == stats.fresh_hits + stats.revalidations + stats.misses + stats.bypasses + stats.coalesced


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(("server_kind", "tool", "own"), [("fastmcp", "doc_result", 1), ("sdk", "doc_mcp_result", 2)])
async def test_a_not_modified_block_is_merged_onto_the_stored_meta(
    server_kind: ServerKind, tool: str, own: int, era: Era, clock: FakeClock, cache: ToolCache
) -> None:
    async with connect("mcp", ServerTarget.memory(build(server_kind)), era, cache) as conn:
        first = await conn.call(tool, KEY)
        assert first.result.meta is not None
        assert first.result.meta[OWN_META_KEY] == {"n": own}
        clock.advance(1.5)
        again = await conn.call(tool, KEY)
    assert again.outcome.status == "revalidated"
    meta = again.result.meta
    assert meta is not None
    assert meta[OWN_META_KEY] == {"n": own}, "the stored copy's other _meta keys are kept"
    assert meta[META_KEY] == {"ttlMs": 1000, "cacheScope": "private", "etag": block(first.result)["etag"]}  # type: ignore[index]
    assert {k: v for k, v in meta.items() if k != META_KEY} == {
        k: v for k, v in first.result.meta.items() if k != META_KEY
    }
    assert plain(again.result) == plain(first.result)


async def stock_rejects_not_modified(client: Any, etag: str) -> None:
    """The stock client's own call_tool fails on the not-modified reply to a strict schema: the hazard."""
    with pytest.raises(Exception, match="required property") as caught:
        await client.call_tool("doc_model", KEY, meta=conditional_request_meta(etag))
    assert isinstance(caught.value, RuntimeError | fastmcp.exceptions.ToolError), caught.value


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("server_kind", SERVER_KINDS)
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_strict_output_schema_gets_the_stored_full_answer(
    view_kind: ViewKind, server_kind: ServerKind, era: Era, clock: FakeClock, cache: ToolCache
) -> None:
    # doc_model's schema requires kind, key and text; the not-modified reply of a server that sends it
    # anyway (docs/protocol.md section 4 forbids it) carries only kind.
    server = build(server_kind, stubs_checked=False)
    async with connect(view_kind, ServerTarget.memory(server), era, cache) as conn:
        first = await conn.view.call_tool("doc_model", KEY)
        clock.advance(6)
        mark = conn.mark()
        again = await conn.view.call_tool("doc_model", KEY)  # the user's own surface
        assert conn.view.last_outcome.status == "revalidated"
        _, reply = conn.log.exchange("tools/call", since=mark)
        assert reply.nbytes < 500, "the server did answer not-modified"
        etag = block(first if isinstance(first, mt.CallToolResult) else _as_mcp(first))["etag"]  # type: ignore[index]
        await stock_rejects_not_modified(conn.client, etag)

    if view_kind == "fastmcp":
        # .data is parsed from the stored full answer, never from the {"kind": ...} stub.
        assert again.data.kind == "doc.model"
        assert again.data.key == "k"
        assert again.data.text == "k: first edition"
        assert again.structured_content == first.structured_content
        assert again.data == first.data
    else:
        assert isinstance(again, mt.CallToolResult)
        assert again.structured_content == {"kind": "doc.model", "key": "k", "text": "k: first edition"}
        assert plain(again) == plain(first)


def _as_mcp(result: Any) -> mt.CallToolResult:
    return mt.CallToolResult(content=result.content, structured_content=result.structured_content, _meta=result.meta)


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_cache_modes(view_kind: ViewKind, clock: FakeClock, cache: ToolCache) -> None:
    docs = DocStore()
    async with connect(view_kind, ServerTarget.memory(build("fastmcp", docs)), MODERN, cache) as conn:
        stored = await conn.call("doc_dict", KEY)
        assert (stored.outcome.status, stored.outcome.stored) == ("miss", True)

        # bypass: to the server, and the cache is neither read nor written.
        docs.write("k", "k: edited behind the cache")
        mark = conn.mark()
        bypass = await conn.call("doc_dict", KEY, cache_mode="bypass")
        assert (bypass.outcome.status, bypass.outcome.stored) == ("bypass", False)
        assert conn.tool_calls(mark) == 1
        assert bypass.result.structured_content["text"] == "k: edited behind the cache"  # type: ignore[index]
        kept = await conn.call("doc_dict", KEY)
        assert kept.outcome.status == "fresh_hit"
        assert kept.result.structured_content["text"] == "k: first edition"  # type: ignore[index]

        # refresh: never served from the cache, but what comes back replaces the entry.
        mark = conn.mark()
        refreshed = await conn.call("doc_dict", KEY, cache_mode="refresh")
        assert (refreshed.outcome.status, refreshed.outcome.stored) == ("miss", True)
        assert conn.tool_calls(mark) == 1
        assert refreshed.result.structured_content["text"] == "k: edited behind the cache"  # type: ignore[index]
        after = await conn.call("doc_dict", KEY, cache_mode="use")
        assert after.outcome.status == "fresh_hit"
        assert after.result.structured_content == refreshed.result.structured_content

        # bypass on a call never seen stores nothing.
        lone = await conn.call("doc_dict", {"key": "other"}, cache_mode="bypass")
        assert lone.outcome.status == "bypass"
        assert (await conn.call("doc_dict", {"key": "other"})).outcome.status == "miss"

        with pytest.raises(ValueError, match="cache mode"):
            await conn.call("doc_dict", KEY, cache_mode="sometimes")
    assert docs.runs_of("doc_dict", "k") == 3


async def test_outcomes_and_totals(clock: FakeClock, cache: ToolCache) -> None:
    async with connect("mcp", ServerTarget.memory(build("sdk")), MODERN, cache) as conn:
        miss = await conn.call("doc_dict", KEY)
        hit = await conn.call("doc_dict", KEY)
        clock.advance(6)
        mark = conn.mark()
        revalidated = await conn.call("doc_dict", KEY)
        _, nm_reply = conn.log.exchange("tools/call", since=mark)
        failed = await conn.call("fails", KEY)
        bypassed = await conn.call("doc_dict", KEY, cache_mode="bypass")
        unstamped = await conn.call("doc_undeclared", KEY)

    body = len(miss.result.model_dump_json(by_alias=True, exclude_none=True).encode())
    assert (miss.outcome.status, miss.outcome.stored, miss.outcome.bytes_saved) == ("miss", True, 0)
    assert miss.outcome.reason.startswith("miss: nothing stored")
    assert (hit.outcome.status, hit.outcome.stored, hit.outcome.bytes_saved) == ("fresh_hit", False, body)
    assert hit.outcome.reason.startswith("fresh:")
    assert revalidated.outcome.status == "revalidated"
    assert revalidated.outcome.reason.startswith("stale: ttl 5000 ms expired")
    # What was saved: the stored answer, less the not-modified reply that came instead (about its size
    # on the wire: the counted message adds the JSON-RPC envelope).
    assert 0 < revalidated.outcome.bytes_saved < body
    assert body - revalidated.outcome.bytes_saved < nm_reply.nbytes
    assert (failed.outcome.status, failed.outcome.stored) == ("miss", False)
    assert failed.outcome.reason.endswith("error results are never stored")
    assert (bypassed.outcome.status, bypassed.outcome.stored) == ("bypass", False)
    assert (unstamped.outcome.status, unstamped.outcome.stored) == ("miss", False)
    assert "no cache block" in unstamped.outcome.reason

    stats = cache.stats
    assert stats.as_dict() == {
        "calls": 6,
        "fresh_hits": 1,
        "revalidations": 1,
        "patched": 0,
        "deltas_unused": 0,
        "misses": 3,
        "bypasses": 1,
        "stored": 1,
        "not_stored": 3,
        "coalesced": 0,
        "store_failures": 0,
        "bytes_saved": hit.outcome.bytes_saved + revalidated.outcome.bytes_saved,
        "stale_while_revalidate": 0,
        "stale_if_error": 0,
        "background_revalidations": 0,
        "background_failures": 0,
        "resent": 0,
    }


@pytest.mark.parametrize("era", ERAS)
async def test_a_tag_only_entry_and_a_ttl_only_entry(era: Era, clock: FakeClock, cache: ToolCache) -> None:
    docs = DocStore()
    async with connect("mcp", ServerTarget.memory(build("sdk", docs)), era, cache) as conn:
        # ttl 0 with a tag: stored, and revalidated before every reuse.
        await conn.call("doc_text_plain", KEY)
        for _ in range(2):
            mark = conn.mark()
            reuse = await conn.call("doc_text_plain", KEY)
            assert reuse.outcome.status == "revalidated"
            assert reuse.outcome.reason.startswith("stale: ttl 0")
            assert conn.tool_calls(mark) == 1
        assert reuse.result.content[0].text == "k: first edition"  # type: ignore[union-attr]

        # A ttl and no tag: fresh for its ttl, then fetched whole (there is nothing to revalidate with).
        first = await conn.call("doc_untagged", KEY)
        assert first.outcome.stored
        assert (await conn.call("doc_untagged", KEY)).outcome.status == "fresh_hit"
        clock.advance(6)
        mark = conn.mark()
        whole = await conn.call("doc_untagged", KEY)
        assert (whole.outcome.status, whole.outcome.stored) == ("miss", True)
        # An untagged entry is worth nothing once stale, so the store may already have dropped it.
        assert whole.outcome.reason.endswith("stored: private, ttl 5000 ms, no tag")
        assert conn.tool_calls(mark) == 1


async def test_the_key_is_server_era_tool_and_arguments_not_meta(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    cache = ToolCache(store, clock=clock)
    docs = DocStore()
    server = build("fastmcp", docs)
    async with connect("mcp", ServerTarget.memory(server), MODERN, cache) as conn:
        await conn.call("doc_dict", {"key": "k"})
        # Request _meta is not part of the key; a different argument, tool or server is.
        assert (await conn.call("doc_dict", {"key": "k"}, meta={"x.example/trace": {"id": 1}})).outcome.status == (
            "fresh_hit"
        )
        assert (await conn.call("doc_dict", {"key": "k2"})).outcome.status == "miss"
        assert (await conn.call("doc_model", {"key": "k"})).outcome.status == "miss"
    async with connect("mcp", ServerTarget.memory(server), MODERN, cache, server_id="another") as conn:
        assert (await conn.call("doc_dict", {"key": "k"})).outcome.status == "miss"
    # Another protocol era is another key: a 2025-11-25 answer is not served to a 2026-07-28 caller.
    async with connect("mcp", ServerTarget.memory(server), "2025-11-25", cache) as conn:
        assert (await conn.call("doc_dict", {"key": "k"})).outcome.status == "miss"
    assert docs.runs_of("doc_dict", "k") == 3


async def test_wrap_refuses_what_it_cannot_wrap(cache: ToolCache) -> None:
    with pytest.raises(TypeError, match="cannot wrap a dict"):
        cache.wrap({})
    assert isinstance(cache.wrap(mcp.Client("http://127.0.0.1:9/mcp")).wrapped, mcp.Client)


async def test_arguments_with_no_canonical_form_are_not_cached(clock: FakeClock, cache: ToolCache) -> None:
    # An integer beyond 64 bits has no canonical form here; the call goes through, uncached.
    docs = DocStore()
    async with connect("mcp", ServerTarget.memory(build("sdk", docs)), MODERN, cache) as conn:
        for _ in range(2):
            call = await conn.call("doc_dict", {"key": 2**70})
            assert (call.outcome.status, call.outcome.stored) == ("bypass", False)
            assert "no canonical form" in call.outcome.reason
    assert cache.stats.bypasses == 2


async def test_everything_else_is_forwarded_to_the_wrapped_client(cache: ToolCache) -> None:
    async with connect("fastmcp", ServerTarget.memory(build("fastmcp")), MODERN, cache) as conn:
        tools = await conn.view.list_tools()
        assert "doc_dict" in {tool.name for tool in tools}
        assert conn.view.wrapped is conn.client
        assert conn.view.cache is cache


@pytest.mark.parametrize("server_kind", SERVER_KINDS)
async def test_end_freshness_makes_the_next_read_a_cheap_revalidation(
    server_kind: ServerKind, clock: FakeClock, cache: ToolCache
) -> None:
    """docs/client.md, "Ending freshness without removing anything": the entry stays, its tag goes with the
    next read, and an unchanged answer comes back not-modified."""
    docs = DocStore()
    async with connect("mcp", ServerTarget.memory(build(server_kind, docs)), MODERN, cache) as conn:
        first = await conn.call("doc_dict", KEY)
        assert (await conn.call("doc_dict", KEY)).outcome.status == "fresh_hit"
        await cache.end_freshness(conn.view.server_id)
        clock.advance(0.01)  # a request at the very instant of the end counts as sent before it
        mark = conn.mark()
        again = await conn.call("doc_dict", KEY)
        assert again.outcome.status == "revalidated"
        assert conn.tool_calls(mark) == 1
        assert again.result.structured_content == first.result.structured_content
        assert docs.runs_of("doc_dict", "k") == 2
        assert (await conn.call("doc_dict", KEY)).outcome.status == "fresh_hit"
