"""Delta replies on the client side (docs/protocol.md section 11): a changed answer comes as the change,
and the cache patches a private copy of what it stored, verifies the digest, and serves and keeps the new
answer exactly as it would have kept it whole.

Real parts throughout: the lab's FastMCP and MCP SDK servers (mcpcache's server half, deltas on by
default) over memory streams, the three client kinds, and the three stores (memory, a SQLite file, a
namespace on a real redis-server). What is asserted is what the caller got (the very answer a stock client
reads in full), what went over the wire, and what the store keeps. Replies a server should never send are
in tests/client/test_delta_hostile.py; the 5 MB notebook over streamable HTTP in test_delta_notebook.py.
"""

from __future__ import annotations

import anyio
import pytest
from stores.backends import Backend, clock_of
from support.transports import ERAS, MODERN, Era, ServerTarget

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.client.entries import TOOLS_GROUP, decode_result
from mcpcache.client.policy import EntryMeta
from mcpcache.delta import FORMATS
from mcpcache.protocol import ACCEPT_DELTA_KEY, META_KEY
from mcpcache.sizes import result_bytes
from mcpcache.stores import MemoryStore, Store
from mcpcache.stores.items import Match

from .harness import VIEW_KINDS, Conn, FakeClock, ViewKind, block, connect, plain
from .lab import SERVER_KINDS, Lab, ServerKind, build_lab

pytestmark = pytest.mark.anyio

KEY = {"key": "k"}
SERVER_ID = "lab"
LONG = " ".join(f"line {n}: the quick brown fox jumps over the lazy dog" for n in range(150))
"""Long enough (about 8 KB) that a one-word edit is a delta far smaller than half the answer."""


def edition(n: int) -> str:
    return f"{LONG}\nedition {n}"


def accepted(meta: dict[str, object] | None) -> object:
    """What a request's cache block listed under `acceptDelta` (None: the field was not there)."""
    inner = (meta or {}).get(META_KEY)
    return inner.get(ACCEPT_DELTA_KEY) if isinstance(inner, dict) else None


async def reply_bytes(conn: Conn, mark: int) -> list[int]:
    """The bytes of every reply to a `tools/call` since `mark`, in order."""
    records = conn.log.since(mark)
    calls = [r.request_id for r in records if r.kind == "request" and r.method == "tools/call"]
    return [r.nbytes for r in records if r.kind == "response" and r.request_id in calls]


async def stored_item_of(store: Store, tool: str) -> tuple[EntryMeta, bytes]:
    """The one stored answer of `tool` (its metadata and body)."""
    (listed,) = [entry async for entry in store.entries(Match(TOOLS_GROUP, tool=tool))]
    item = await store.load(listed.key)
    assert item is not None
    meta = EntryMeta.from_json(item.meta)
    assert meta is not None
    return meta, item.body


# -- the flow, on every store, client kind and server kind ------------------------------------------


@pytest.mark.parametrize("server_kind", SERVER_KINDS)
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_an_edited_answer_comes_as_a_delta_and_is_patched(
    backend: Backend, opened: Store, view_kind: ViewKind, server_kind: ServerKind
) -> None:
    clock = clock_of(backend)
    cache = ToolCache(opened, CacheSettings(trusted=True), clock=clock)
    lab = Lab()
    lab.docs.write("k", edition(1))
    target = ServerTarget.memory(build_lab(server_kind, lab))
    async with connect(view_kind, target, MODERN, cache, server_id=SERVER_ID) as conn:
        first = await conn.call("read", KEY)
        assert (first.outcome.status, first.outcome.stored) == ("miss", True)
        full_bytes = (await reply_bytes(conn, 0))[-1]

        await conn.call("edit", {"key": "k", "text": edition(2)})  # mutating: ends the freshness
        clock.advance(0.001)
        lab.seen_meta.clear()
        mark = conn.mark()
        patched = await conn.call("read", KEY)
        (delta_bytes,) = await reply_bytes(conn, mark)
        stock = await conn.direct("read", KEY)

        assert (patched.outcome.status, patched.outcome.stored) == ("patched", True), patched.outcome.reason
        assert patched.outcome.delta_unused is None
        assert plain(patched.result) == plain(stock)
        assert patched.result.structured_content["text"] == edition(2)  # type: ignore[index]
        assert block(patched.result) == block(stock)  # the new tag, ttl and scope, and no delta field
        assert delta_bytes * 8 < full_bytes
        assert patched.outcome.bytes_saved > full_bytes // 2
        if server_kind == "sdk":  # the SDK lab records what each request carried
            assert accepted(lab.seen_meta[0]) == list(FORMATS)

        # Kept as a full answer: served fresh next, from this cache and from another on the same store.
        again = await conn.call("read", KEY)
        assert again.outcome.status == "fresh_hit"
        assert plain(again.result) == plain(stock)
    other = ToolCache(opened, CacheSettings(trusted=True, deltas=False), clock=clock)
    async with connect(view_kind, target, MODERN, other, server_id=SERVER_ID) as conn:
        seen = await conn.call("read", KEY)
        assert seen.outcome.status == "fresh_hit"
        assert plain(seen.result) == plain(stock)

    assert (cache.stats.patched, cache.stats.deltas_unused, cache.stats.store_failures) == (1, 0, 0)
    assert cache.stats.stored == 2


async def test_a_patched_answer_is_stored_as_served_whatever_its_caller_does_with_it(
    backend: Backend, opened: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The patched answer is written to the store after it is returned: what is written is the answer as
    served, even when the caller changes the result it got before the write lands; a lookup in the process
    waits for the write, and another cache over the store reads it once `flush()` returns."""
    clock = clock_of(backend)
    cache = ToolCache(opened, CacheSettings(trusted=True), clock=clock)
    lab = Lab()
    lab.docs.write("k", edition(1))
    target = ServerTarget.memory(build_lab("fastmcp", lab))
    async with connect("mcp", target, MODERN, cache, server_id=SERVER_ID) as conn:
        await conn.call("read", KEY)
        await conn.call("edit", {"key": "k", "text": edition(2)})
        clock.advance(0.001)
        patched = await conn.call("read", KEY)
        assert patched.outcome.status == "patched", patched.outcome.reason
        served = plain(patched.result)
        patched.result.structured_content["text"] = "changed by the caller"  # type: ignore[index]
        patched.result.content.clear()
        again = await conn.call("read", KEY)  # waits for the write of the patched answer
        assert again.outcome.status == "fresh_hit"
        assert plain(again.result) == served
        await cache.flush()
    other = ToolCache(opened, CacheSettings(trusted=True), clock=clock)
    async with connect("mcp", target, MODERN, other, server_id=SERVER_ID) as conn:
        seen = await conn.call("read", KEY)
        assert seen.outcome.status == "fresh_hit"
        assert plain(seen.result) == served
    meta, body = await stored_item_of(opened, "read")
    assert plain(decode_result(body)) == served
    assert (cache.stats.stored, cache.stats.not_stored) == (2, 1)  # the edit is never stored
    # Its size was counted from the ops before it was encoded (after it was returned): the very bytes the
    # encoding measures, so what the outcome said it saved was exact.
    stored = decode_result(body)
    assert stored is not None
    assert meta.size == result_bytes(stored)
    assert "a patched answer is" not in caplog.text


async def test_a_patched_answer_found_too_large_when_written_is_not_kept(clock: FakeClock) -> None:
    """Its size is known from the ops and it is encoded after it is returned: when the body turns out above
    `max_answer_bytes`, the write keeps nothing, drops the base it supersedes, and corrects the counts."""
    store = MemoryStore(clock=clock)
    lab = Lab()
    lab.docs.write("k", edition(1))
    target = ServerTarget.memory(build_lab("fastmcp", lab))
    async with connect(
        "mcp", target, MODERN, ToolCache(store, CacheSettings(trusted=True), clock=clock), server_id=SERVER_ID
    ) as conn:
        await conn.call("read", KEY)
    _meta, body = await stored_item_of(store, "read")
    cache = ToolCache(store, CacheSettings(trusted=True, max_answer_bytes=len(body) + 40), clock=clock)
    async with connect("mcp", target, MODERN, cache, server_id=SERVER_ID) as conn:
        await conn.call("edit", {"key": "k", "text": edition(2) + " and a few more words" * 10})
        clock.advance(0.001)
        with anyio.fail_after(10):  # the write must not wait for itself
            patched = await conn.call("read", KEY)
            assert patched.outcome.status == "patched", patched.outcome.reason
            assert plain(patched.result) == plain(await conn.direct("read", KEY))
            await cache.flush()
    assert [entry async for entry in store.entries(Match(TOOLS_GROUP, tool="read"))] == []
    assert (cache.stats.stored, cache.stats.not_stored) == (0, 2)  # the edit, and the patched answer


@pytest.mark.parametrize("era", ERAS)
async def test_deltas_in_both_protocol_eras(era: Era, clock: FakeClock, cache: ToolCache) -> None:
    lab = Lab()
    lab.docs.write("k", edition(1))
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), era, cache) as conn:
        await conn.call("read_zero", KEY)  # ttl 0: every reuse asks
        for n in (2, 3):
            lab.docs.write("k", edition(n))  # behind the cache's back
            call = await conn.call("read_zero", KEY)
            assert call.outcome.status == "patched", call.outcome.reason
            assert plain(call.result) == plain(await conn.direct("read_zero", KEY))
        unchanged = await conn.call("read_zero", KEY)
        assert unchanged.outcome.status == "revalidated"  # an unchanged answer is still a not-modified reply
        assert plain(unchanged.result) == plain(call.result)


async def test_the_patched_answer_is_stored_in_the_bytes_a_full_answer_is(clock: FakeClock) -> None:
    """Two caches on stores of their own, one taking deltas and one not, read the same versions: the
    patched entry and the entry stored from the whole answer are byte for byte the same."""
    lab = Lab()
    lab.docs.write("k", edition(1))
    target = ServerTarget.memory(build_lab("fastmcp", lab))
    stores = {"deltas": MemoryStore(clock=clock), "whole": MemoryStore(clock=clock)}
    caches = {
        "deltas": ToolCache(stores["deltas"], clock=clock),
        "whole": ToolCache(stores["whole"], CacheSettings(deltas=False), clock=clock),
    }
    async with (
        connect("mcp", target, MODERN, caches["deltas"], server_id=SERVER_ID) as with_deltas,
        connect("mcp", target, MODERN, caches["whole"], server_id=SERVER_ID) as without,
    ):
        for conn in (with_deltas, without):
            await conn.call("read_zero", KEY)
        lab.docs.write("k", edition(2))
        patched = await with_deltas.call("read_zero", KEY)
        whole = await without.call("read_zero", KEY)
        assert (patched.outcome.status, whole.outcome.status) == ("patched", "miss")
    (meta, body), (whole_meta, whole_body) = [await stored_item_of(stores[n], "read_zero") for n in ("deltas", "whole")]
    assert body == whole_body
    assert (meta.etag, meta.size, meta.stored, meta.scope, meta.ttl_ms) == (
        whole_meta.etag,
        whole_meta.size,
        whole_meta.stored,
        whole_meta.scope,
        whole_meta.ttl_ms,
    )
    decoded = decode_result(body)
    assert decoded is not None
    assert decoded.model_dump() == patched.result.model_dump() == whole.result.model_dump()


async def test_deltas_off_asks_for_none_and_gets_the_whole_answer(clock: FakeClock) -> None:
    cache = ToolCache(MemoryStore(clock=clock), CacheSettings(deltas=False), clock=clock)
    lab = Lab()
    lab.docs.write("k", edition(1))
    async with connect("session", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        await conn.call("read_zero", KEY)
        lab.docs.write("k", edition(2))
        lab.seen_meta.clear()
        call = await conn.call("read_zero", KEY)
    assert (call.outcome.status, call.outcome.stored) == ("miss", True)
    assert call.result.structured_content["text"] == edition(2)  # type: ignore[index]
    assert len(lab.seen_meta) == 1
    assert accepted(lab.seen_meta[0]) is None
    assert lab.seen_meta[0][META_KEY]["etag"]  # type: ignore[index]  # still a conditional request
    with pytest.raises(TypeError, match="deltas"):
        ToolCache(MemoryStore(), CacheSettings(deltas="yes"))  # type: ignore[arg-type]


async def test_a_patched_answer_is_the_callers_own_copy(clock: FakeClock, cache: ToolCache) -> None:
    """The decoded tier holds the patched answer like any other: what the caller does to the copy it was
    served reaches neither the tier nor the store, and the next hit is the server's answer."""
    lab = Lab()
    lab.docs.write("k", edition(1))
    async with connect("fastmcp", ServerTarget.memory(build_lab("fastmcp", lab)), MODERN, cache) as conn:
        await conn.call("read", KEY)
        clock.advance(6)  # stale: revalidated with its tag
        lab.docs.write("k", edition(2))
        patched = await conn.call("read", KEY)
        assert patched.outcome.status == "patched"
        expected = plain(patched.result)
        patched.result.structured_content["text"] = "scribbled over"  # type: ignore[index]
        patched.result.content.clear()
        hit = await conn.call("read", KEY)
    assert hit.outcome.status == "fresh_hit"
    assert plain(hit.result) == expected


# -- single flight --------------------------------------------------------------------------------------


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_callers_sharing_a_request_all_get_the_patched_answer(
    view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    lab = Lab()
    lab.docs.write("k", edition(1))
    async with connect(view_kind, ServerTarget.memory(build_lab("fastmcp", lab)), MODERN, cache) as conn:
        await conn.call("gated", KEY)  # ttl 0, annotated read-only: identical calls share a request
        lab.docs.write("k", edition(2))
        lab.gate = anyio.Event()
        results: list[object] = []

        async def one() -> None:
            results.append(await conn.call("gated", KEY))

        mark = conn.mark()
        with anyio.fail_after(30):  # a guard against a hang, not a timing assertion
            async with anyio.create_task_group() as group:
                for _ in range(5):
                    group.start_soon(one)
                await anyio.wait_all_tasks_blocked()
                lab.gate.set()
        assert conn.tool_calls(mark) == 1
        stock = await conn.direct("gated", KEY)
    outcomes = sorted((call.outcome.status, call.outcome.coalesced) for call in results)  # type: ignore[attr-defined]
    assert outcomes == [("patched", False)] + [("patched", True)] * 4
    assert all(plain(call.result) == plain(stock) for call in results)  # type: ignore[attr-defined]
    assert (cache.stats.patched, cache.stats.coalesced) == (1, 4)


# -- the base the delta names ---------------------------------------------------------------------------


@pytest.mark.parametrize("tier", ["held decoded", "store only"])
async def test_a_base_the_store_lost_meanwhile(tier: str, clock: FakeClock) -> None:
    """The store loses the stored answer while the conditional request is out (another cache clears it). A
    cache that still holds that version decoded patches it; one that must load it from the store does not
    hold the base any more, and asks again in full. Either way the caller gets the server's answer."""
    store = MemoryStore(clock=clock)
    cache = ToolCache(store, CacheSettings(decoded_tier_bytes=None if tier == "held decoded" else 0), clock=clock)
    lab = Lab()
    lab.docs.write("k", edition(1))
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        await conn.call("gated", KEY)
        lab.docs.write("k", edition(2))
        lab.gate = anyio.Event()
        lab.seen_meta.clear()
        results: list[object] = []

        async def read() -> None:
            results.append(await conn.call("gated", KEY))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(read)
                while lab.entered < 2:  # noqa: ASYNC110 - the lab has no event for it
                    await anyio.sleep(0.001)
                assert await ToolCache(store, clock=clock).clear() == 1
                lab.gate.set()
        sent = [accepted(meta) for meta in lab.seen_meta]
        stock = await conn.direct("gated", KEY)
    (call,) = results
    assert plain(call.result) == plain(stock)  # type: ignore[attr-defined]
    assert call.result.structured_content["text"] == edition(2)  # type: ignore[attr-defined]
    if tier == "held decoded":
        assert call.outcome.status == "patched"  # type: ignore[attr-defined]
        assert sent == [list(FORMATS)]
    else:
        assert (call.outcome.status, call.outcome.stored) == ("miss", True)  # type: ignore[attr-defined]
        assert "the delta's base is not held" in call.outcome.delta_unused  # type: ignore[attr-defined]
        assert sent == [list(FORMATS), None]
        assert cache.stats.deltas_unused == 1
