"""The decoded tier (mcpcache/client/tier.py): answers kept decoded in front of every store.

What must hold whatever the tier does: a caller that changes what it was served never sees that change
in a later serve (after a miss, a fresh hit, a revalidation, and as a single-flight follower), on every
store; the store still decides freshness and versions (a lookup still asks it, for the metadata only when
the tier holds the answer); and another writer's version is served, never the tier's older copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mcp_types as mt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from stores.backends import BYTE_FLIP, Backend, FakeClock, clock_of, sqlite_backend
from support.transports import MODERN, ServerTarget

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.client.entries import decode_result, encode_result
from mcpcache.client.keys import CallIdentity
from mcpcache.client.tier import DecodedTier, _planned, copy_result, hold
from mcpcache.protocol import META_KEY
from mcpcache.stores import Item, MemoryStore, Store
from mcpcache.stores.items import body_checksum

from .harness import connect
from .lab import ROWS, Lab, build_lab
from .test_single_flight import all_at_once

pytestmark = pytest.mark.anyio

K = {"key": "k"}
SERVER_ID = "lab"
FIRST = "k: first edition"


def scribble(result: mt.CallToolResult) -> None:
    """Change everything a caller can reach in what it was served."""
    assert isinstance(result.structured_content, dict)
    result.structured_content["text"] = "scribbled"
    result.structured_content["added"] = ["scribbled"]
    if "rows" in result.structured_content:
        result.structured_content["rows"][0]["tags"].append("scribbled")
        result.structured_content["rows"].pop()
    first = result.content[0]
    assert isinstance(first, mt.TextContent)
    first.text = "scribbled"
    result.content.append(mt.TextContent(type="text", text="appended"))
    assert result.meta is not None
    block = result.meta[META_KEY]
    assert isinstance(block, dict)
    block["etag"] = "scribbled"
    result.meta["scribbled"] = True
    result.is_error = True


def assert_pristine(result: mt.CallToolResult, text: str = FIRST) -> None:
    assert result.is_error is not True
    assert isinstance(result.structured_content, dict)
    assert result.structured_content["text"] == text
    assert "added" not in result.structured_content
    rows = result.structured_content.get("rows")
    assert rows is None or (len(rows) == ROWS and rows[0]["tags"] == ["a", "b"])
    assert [c.text for c in result.content if isinstance(c, mt.TextContent)] != ["scribbled"]
    assert len(result.content) == 1
    assert "appended" not in str(result.content)
    assert result.meta is not None
    assert "scribbled" not in result.meta
    block = result.meta[META_KEY]
    assert isinstance(block, dict)
    assert block["etag"] != "scribbled"


def key_of(cache: ToolCache, era: str | None) -> str:
    return CallIdentity(SERVER_ID, cache.partition, era or "", "read", K).key("private")


@pytest.mark.parametrize("key", ["k", "rows"], ids=["few values", "many small values"])
async def test_a_callers_changes_never_reach_a_later_serve(backend: Backend, opened: Store, key: str) -> None:
    clock = clock_of(backend)
    cache = ToolCache(opened, clock=clock)
    args = {"key": key}
    first = f"{key}: first edition"
    async with connect("mcp", ServerTarget.memory(build_lab("sdk")), MODERN, cache, server_id=SERVER_ID) as conn:
        statuses = []
        for step in ("miss", "fresh", "fresh", "revalidate", "fresh", "revalidate", "revalidate", "fresh"):
            if step == "revalidate":
                clock.advance(6)
            call = await conn.call("read", args)
            statuses.append(call.outcome.status)
            assert_pristine(call.result, first)
            scribble(call.result)
            held = list(cache._tier._held.values())
            assert [h.plan is not None for h in held] == [True]  # structured content: copied by its plan
        again = await conn.call("read", args)
        assert_pristine(again.result, first)
    assert statuses == [
        "miss",
        "fresh_hit",
        "fresh_hit",
        "revalidated",
        "fresh_hit",
        "revalidated",
        "revalidated",
        "fresh_hit",
    ]


@pytest.mark.parametrize("key", ["k", "rows"], ids=["few values", "many small values"])
async def test_followers_changes_never_reach_each_other_or_a_later_serve(
    backend: Backend, opened: Store, key: str
) -> None:
    clock = clock_of(backend)
    cache = ToolCache(opened, clock=clock)
    lab = Lab()
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache, server_id=SERVER_ID) as conn:
        gated = CallIdentity(SERVER_ID, cache.partition, MODERN, "gated", {"key": key}).key("private")

        def all_joined() -> bool:
            # The eleven others wait for the one sent (a store's I/O must not leave any of them behind).
            flight = cache._flights.current(gated)
            return flight is not None and flight.waiting == 11

        for wave in ("miss", "revalidated"):
            mark = conn.mark()
            calls = await all_at_once(conn, lab, [{"key": key}] * 12, ready=all_joined)
            assert conn.tool_calls(mark) == 1
            assert {c.outcome.status for c in calls} == {wave}
            assert sum(c.outcome.coalesced for c in calls) == 11
            for call in calls:
                # Each caller's copy is pristine, whatever the callers before it did to theirs.
                assert isinstance(call.result.structured_content, dict)
                assert call.result.structured_content["text"] == f"{key}: first edition"
                assert "added" not in call.result.structured_content
                assert len(call.result.content) == 1
                scribble(call.result)
            lab.gate = None
            served = await conn.call("gated", {"key": key})  # ttl 0: a revalidation, served from what was kept
            assert served.outcome.status == "revalidated"
            assert isinstance(served.result.structured_content, dict)
            assert served.result.structured_content["text"] == f"{key}: first edition"
            assert len(served.result.content) == 1
            assert (served.result.meta or {}).get("scribbled") is None


class CountingStore(MemoryStore):
    """A memory store that counts how its items are read."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.loads: list[list[str]] = []
        self.peeks: list[list[str]] = []

    async def load_many(self, keys: Sequence[str]) -> list[Item | None]:
        self.loads.append(list(keys))
        return await super().load_many(keys)

    async def peek_many(self, keys: Sequence[str]) -> list[Item | None]:
        self.peeks.append(list(keys))
        return await super().peek_many(keys)


async def test_a_held_answer_is_looked_up_by_its_metadata_only(clock: FakeClock) -> None:
    store = CountingStore(clock)
    cache = ToolCache(store, clock=clock)
    async with connect("mcp", ServerTarget.memory(build_lab("sdk")), MODERN, cache, server_id=SERVER_ID) as conn:
        await conn.call("read", K)  # the miss keeps the answer decoded
        for _ in range(3):
            assert (await conn.call("read", K)).outcome.status == "fresh_hit"
        clock.advance(6)
        assert (await conn.call("read", K)).outcome.status == "revalidated"
    assert store.loads == []  # no body was read: the held copy served every hit and the revalidation
    assert len(store.peeks) == 5  # every lookup still asked the store (freshness lives there)


async def test_without_the_tier_every_lookup_reads_the_body(clock: FakeClock) -> None:
    store = CountingStore(clock)
    cache = ToolCache(store, CacheSettings(decoded_tier_bytes=0), clock=clock)
    async with connect("mcp", ServerTarget.memory(build_lab("sdk")), MODERN, cache, server_id=SERVER_ID) as conn:
        await conn.call("read", K)
        call = await conn.call("read", K)
        scribble(call.result)
        again = await conn.call("read", K)
        assert again.outcome.status == "fresh_hit"
        assert_pristine(again.result)
    # Every lookup reads the metadata; each of the two hits then loads the one body it serves.
    assert (len(store.loads), len(store.peeks)) == (2, 3)
    assert all(len(keys) == 1 for keys in store.loads)


async def test_another_writers_version_is_served_not_the_held_copy(backend: Backend, opened: Store) -> None:
    clock = clock_of(backend)
    cache = ToolCache(opened, clock=clock)
    async with connect("mcp", ServerTarget.memory(build_lab("sdk")), MODERN, cache, server_id=SERVER_ID) as conn:
        first = await conn.call("read", K)
        key = key_of(cache, conn.client.session.protocol_version)
        item = await opened.load(key)
        assert item is not None
        # Another process stores another answer under the key: same metadata, same tag, another body.
        assert isinstance(first.result.structured_content, dict)
        other = first.result.model_copy(
            update={"structured_content": {**first.result.structured_content, "text": "other"}}
        )
        replaced = Item(
            item.meta, encode_result(other), item.group, item.created_at, item.expires_at, item.tag, item.stamp
        )
        assert await opened.save(key, replaced)
        call = await conn.call("read", K)
        assert call.outcome.status == "fresh_hit"
        assert isinstance(call.result.structured_content, dict)
        assert call.result.structured_content["text"] == "other"
        # ...and that version is now the one held: served again, pristine after a caller's changes.
        scribble(call.result)
        again = await conn.call("read", K)
        assert_pristine(again.result, text="other")
        # Removed underneath: never served from the tier.
        await opened.remove(key)
        assert (await conn.call("read", K)).outcome.status == "miss"


class ReplacingStore(MemoryStore):
    """A memory store in which another writer replaces an item between the cache's metadata read and the
    load of its body (`replacement`, applied once, as the load begins)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.replacement: tuple[str, Item] | None = None

    async def load_many(self, keys: Sequence[str]) -> list[Item | None]:
        if self.replacement is not None:
            key, item = self.replacement
            self.replacement = None
            assert await self.save(key, item)
        return await super().load_many(keys)


@pytest.mark.parametrize("when", ["fresh", "revalidated"])
async def test_an_answer_replaced_while_its_body_loads_is_looked_up_again(clock: FakeClock, when: str) -> None:
    store = ReplacingStore(clock)
    cache = ToolCache(store, CacheSettings(decoded_tier_bytes=0), clock=clock)
    lab = Lab()
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache, server_id=SERVER_ID) as conn:
        first = await conn.call("read", K)
        key = key_of(cache, conn.client.session.protocol_version)
        item = await store.load(key)
        assert item is not None
        if when == "revalidated":
            clock.advance(6)  # stale: the lookup revalidates, and the body is loaded once the server confirms
        # Another process stores a stale answer under another tag: it must be judged by its own metadata.
        assert isinstance(first.result.structured_content, dict)
        other = first.result.model_copy(
            update={"structured_content": {**first.result.structured_content, "text": "other"}}
        )
        meta = {**item.meta, "etag": 'W/"0000"', "receivedAt": clock() - 60}
        replaced = Item(
            meta, encode_result(other), item.group, item.created_at, item.expires_at, 'W/"0000"', item.stamp
        )
        store.replacement = (key, replaced)
        call = await conn.call("read", K)
        assert call.outcome.status == "miss"  # looked up again: stale under its tag, which the server does not confirm
        assert_pristine(call.result)
        assert lab.runs("read", "k") == (2 if when == "fresh" else 3)
        # The other writer's entry was replaced by the newer answer, never removed for being unservable.
        assert (await conn.call("read", K)).outcome.status == "fresh_hit"


async def test_a_body_corrupted_underneath_a_held_answer_serves_the_held_version(tmp_path: Path) -> None:
    backend = sqlite_backend(tmp_path / "cache.db")
    assert backend.clock is not None
    async with backend.open() as store:
        cache = ToolCache(store, clock=backend.clock)
        async with connect("mcp", ServerTarget.memory(build_lab("sdk")), MODERN, cache, server_id=SERVER_ID) as conn:
            await conn.call("read", K)
            key = key_of(cache, conn.client.session.protocol_version)
            await backend.corruptions[BYTE_FLIP](store, key)
            call = await conn.call("read", K)
            # The held copy is the decoding of the body that was saved, and the store still records that
            # version's tag and checksum: it is that answer, whatever happened to the bytes since.
            assert call.outcome.status == "fresh_hit"
            assert_pristine(call.result)
            cache._tier.clear()  # a process without the copy reads the body: corrupt, so a miss
            assert (await conn.call("read", K)).outcome.status == "miss"


def answer(text: str, rows: int = 0, blocks: int = 1) -> mt.CallToolResult:
    structured: dict[str, Any] = {
        "text": text,
        "rows": [{"id": i, "name": f"r{i}", "tags": ["a", "b"]} for i in range(rows)],
    }
    return mt.CallToolResult(
        content=[mt.TextContent(type="text", text=text) for _ in range(blocks)],
        structured_content=structured,
        _meta={"m": {"n": [1]}},
    )


@pytest.mark.parametrize(
    ("rows", "blocks", "form"),
    [(0, 1, "planned"), (2000, 1, "planned"), (2000, 6, "pickled"), (0, 6, "structural")],
    ids=[
        "few values (planned)",
        "many small values (planned)",
        "many values and blocks (pickled)",
        "few values, many blocks (structural copy)",
    ],
)
def test_every_copy_is_private_and_equal(rows: int, blocks: int, form: str) -> None:
    original = answer("x" * 5000, rows, blocks)
    body = encode_result(original)
    decoded = decode_result(body)
    assert decoded is not None
    held = hold(decoded, body, "t", body_checksum(body))
    assert (held.plan is not None, held.pickled is not None) == (form == "planned", form == "pickled")
    copies = [held.copy(), held.copy(), copy_result(decoded)]
    for copy in copies:
        assert copy == original
        assert copy is not held.result
        assert copy.structured_content is not held.result.structured_content
        assert copy.content[0] is not held.result.content[0]
        assert copy.meta is not held.result.meta
        assert isinstance(copy.structured_content, dict)
        copy.structured_content["rows"].append("scribbled")
        copy.content[0].text = "scribbled"  # type: ignore[union-attr]
        assert copy.meta is not None
        copy.meta["m"]["n"].append(2)
    assert held.copy() == original
    assert held.result == original


def test_the_tier_is_bounded_and_keyed_by_version() -> None:
    body = encode_result(answer("y" * 1000))
    size = len(body)
    tier = DecodedTier(2 * size + 10)
    for key in ("a", "b", "c"):
        decoded = decode_result(body)
        assert decoded is not None
        tier.put(key, hold(decoded, body, "t", "sum"))
    assert (len(tier), tier.bytes) == (2, 2 * size)
    assert not tier.holds("a")  # the least recently used went first
    assert tier.get("b", "t", "sum") is not None
    assert tier.get("b", "t", "other sum") is None  # another version: dropped
    assert not tier.holds("b")
    assert tier.get("c", "other tag", "sum") is None
    assert (len(tier), tier.bytes) == (0, 0)
    off = DecodedTier(0)
    decoded = decode_result(body)
    assert decoded is not None
    off.put("a", hold(decoded, body, "t", "sum"))
    assert len(off) == 0
    with pytest.raises(ValueError, match="decoded_tier_bytes"):
        ToolCache(MemoryStore(), CacheSettings(decoded_tier_bytes=-1))


async def test_an_answer_larger_than_the_tier_is_served_from_the_store(clock: FakeClock) -> None:
    store = CountingStore(clock)
    cache = ToolCache(store, CacheSettings(decoded_tier_bytes=10), clock=clock)
    async with connect("mcp", ServerTarget.memory(build_lab("sdk")), MODERN, cache, server_id=SERVER_ID) as conn:
        await conn.call("read", K)
        for _ in range(2):
            call = await conn.call("read", K)
            assert call.outcome.status == "fresh_hit"
            assert_pristine(call.result)
            scribble(call.result)
    # Every lookup reads the metadata; each of the two hits then loads the one body it serves.
    assert (len(store.loads), len(store.peeks)) == (2, 3)
    assert all(len(keys) == 1 for keys in store.loads)


def _containers(value: Any) -> list[object]:
    """Every mutable container reachable in a served answer: dicts, lists, models and their field sets."""
    found: list[object] = []
    if isinstance(value, dict):
        found.append(value)
        for item in value.values():
            found.extend(_containers(item))
    elif isinstance(value, list):
        found.append(value)
        for item in value:
            found.extend(_containers(item))
    elif isinstance(value, BaseModel):
        found.extend([value, value.__dict__, value.__pydantic_fields_set__])
        for item in value.__dict__.values():
            found.extend(_containers(item))
    return found


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=4), inner, max_size=6),
    max_leaves=60,
)


_small_meta = st.none() | st.dictionaries(st.text(max_size=4), _json, max_size=2)
_annotations = st.none() | st.builds(
    mt.Annotations, audience=st.none() | st.lists(st.sampled_from(["user", "assistant"]), max_size=2)
)


def _block(kind: str, meta: dict[str, Any] | None, annotations: mt.Annotations | None, n: int) -> mt.ContentBlock:
    if kind == "image":
        return mt.ImageContent(type="image", data="AA==", mime_type="image/png", annotations=annotations, _meta=meta)
    if kind == "audio":
        return mt.AudioContent(type="audio", data="AA==", mime_type="audio/wav", annotations=annotations, _meta=meta)
    if kind == "link":
        link = mt.ResourceLink(type="resource_link", uri=f"file:///r{n}", name=f"r{n}", annotations=annotations)
        return link.model_copy(update={"meta": meta})
    if kind == "text-resource":
        inner = mt.TextResourceContents(uri=f"file:///t{n}", text="t", mime_type="text/plain", _meta=meta)
        return mt.EmbeddedResource(type="resource", resource=inner, annotations=annotations, _meta=meta)
    if kind == "blob-resource":
        blob = mt.BlobResourceContents(uri=f"file:///b{n}", blob="AA==", _meta=meta)
        return mt.EmbeddedResource(type="resource", resource=blob, annotations=annotations)
    return mt.TextContent(type="text", text=f"b{n}", annotations=annotations, _meta=meta)


@settings(max_examples=120, deadline=None)
@given(
    structured=st.dictionaries(st.text(max_size=6), _json, max_size=4),
    blocks=st.lists(
        st.tuples(
            st.sampled_from(["text", "image", "audio", "link", "text-resource", "blob-resource"]),
            _small_meta,
            _annotations,
        ),
        max_size=4,
    ),
    meta=_small_meta,
    is_error=st.booleans(),
)
def test_a_planned_copy_of_any_content_block_is_equal_and_shares_no_container(
    structured: dict[str, Any],
    blocks: list[tuple[str, dict[str, Any] | None, mt.Annotations | None]],
    meta: dict[str, Any] | None,
    is_error: bool,
) -> None:
    """Whichever way a planned answer is copied (compiled for a small plan, followed for a large one), the
    copy equals the held answer and no dict, list, model or field set in it is one of the held answer's:
    with every kind of content block (an embedded resource's nested model included), each with its own
    metadata and annotations, and plans of different model classes alike in layout shared."""
    original = mt.CallToolResult(
        content=[_block(kind, m, a, n) for n, (kind, m, a) in enumerate(blocks)],
        structured_content=structured,
        _meta=meta,
        is_error=is_error,
    )
    body = encode_result(original)
    decoded = decode_result(body)
    assert decoded is not None
    held = hold(decoded, body, "t", body_checksum(body))
    assert held.plan is not None
    held_ids = {id(c) for c in _containers(held.result)}
    for copy in (held.copy(), _planned(held.result, held.plan), held.copy()):
        assert copy == decoded
        assert [type(block) for block in copy.content] == [type(block) for block in decoded.content]
        assert copy.model_dump(by_alias=True) == original.model_dump(by_alias=True)
        assert not [c for c in _containers(copy) if id(c) in held_ids]
