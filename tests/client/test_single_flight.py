"""Concurrent identical calls share one request (docs/protocol.md section 5).

The lab's `gated` tool holds its body until the test opens the gate, and the test opens it only once
every caller is blocked, so all of them are in flight together whatever the scheduler does. What is
counted: `tools/call` messages at the transport and body runs at the server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from support.transports import MODERN, ServerTarget

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.stores import MemoryStore

from .harness import VIEW_KINDS, Conn, FakeClock, ViewKind, connect, plain
from .lab import Lab, build_lab

pytestmark = pytest.mark.anyio

CALLERS = 100
K = {"key": "k"}


async def all_at_once(
    conn: Conn,
    lab: Lab,
    arguments: list[dict[str, Any]],
    via_call_tool: bool = False,
    *,
    ready: Callable[[], bool] | None = None,
) -> list[Any]:
    """Start one call per arguments, open the gate once all are blocked (and `ready()` holds: a task waiting
    on a store's I/O counts as blocked too, before it has joined anything); results in order."""
    results: list[Any] = [None] * len(arguments)
    lab.gate = anyio.Event()

    async def one(index: int) -> None:
        if via_call_tool:
            results[index] = await conn.view.call_tool("gated", arguments[index])
        else:
            results[index] = await conn.call("gated", arguments[index])

    with anyio.fail_after(30):  # a guard against a hang, not a timing assertion
        async with anyio.create_task_group() as group:
            for index in range(len(arguments)):
                group.start_soon(one, index)
            await anyio.wait_all_tasks_blocked()
            while ready is not None and not ready():  # noqa: ASYNC110 - the cache has no event to wait on
                await anyio.sleep(0.005)
            lab.gate.set()
    return results


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_hundred_identical_calls_send_one_request(
    view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    lab = Lab()
    async with connect(view_kind, ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        mark = conn.mark()
        calls = await all_at_once(conn, lab, [K] * CALLERS)
        assert conn.tool_calls(mark) == 1
        assert lab.runs("gated", "k") == 1

        leaders = [c for c in calls if not c.outcome.coalesced]
        assert len(leaders) == 1
        assert (leaders[0].outcome.status, leaders[0].outcome.stored) == ("miss", True)
        followers = [c for c in calls if c.outcome.coalesced]
        assert all(c.outcome.status == "miss" and not c.outcome.stored for c in followers)
        assert all(c.outcome.bytes_saved > 0 for c in followers)

        # Equal answers, each its own object: changing one changes no other.
        assert all(c.result == calls[0].result for c in calls)
        assert len({id(c.result) for c in calls}) == CALLERS
        assert len({id(c.result.structured_content) for c in calls}) == CALLERS
        assert len({id(c.result.content[0]) for c in calls}) == CALLERS
        calls[0].result.structured_content["text"] = "scribbled"
        calls[0].result.content[0].text = "scribbled"
        assert calls[1].result.structured_content["text"] == "k: first edition"
        assert calls[1].result.content[0].text != "scribbled"

        # ttl 0: the next wave revalidates, still with one request between them.
        mark = conn.mark()
        again = await all_at_once(conn, lab, [K] * CALLERS)
        assert conn.tool_calls(mark) == 1
        assert {c.outcome.status for c in again} == {"revalidated"}
        assert all(plain(c.result) == plain(calls[1].result) for c in again)

    stats = cache.stats
    assert (stats.calls, stats.coalesced, stats.misses, stats.revalidations) == (2 * CALLERS, 2 * CALLERS - 2, 1, 1)


async def test_fastmcp_call_tool_parses_each_callers_own_copy(clock: FakeClock, cache: ToolCache) -> None:
    lab = Lab()
    async with connect("fastmcp", ServerTarget.memory(build_lab("fastmcp", lab)), MODERN, cache) as conn:
        mark = conn.mark()
        results = await all_at_once(conn, lab, [K] * 20, via_call_tool=True)
        assert conn.tool_calls(mark) == 1
    assert all(r.data == results[0].data for r in results)
    assert len({id(r.data) for r in results}) == 20


async def test_different_calls_are_not_shared(clock: FakeClock, cache: ToolCache) -> None:
    lab = Lab()
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        mark = conn.mark()
        keys = [{"key": f"k{i % 10}"} for i in range(50)]
        calls = await all_at_once(conn, lab, keys)
        assert conn.tool_calls(mark) == 10
    for arguments, call in zip(keys, calls, strict=True):
        assert call.result.structured_content["key"] == arguments["key"]
    # Other modes never wait for a call in flight: they each go to the server.
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        mark = conn.mark()
        lab.gate = None
        async with anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(lambda: conn.call("gated", K, cache_mode="refresh"))
        assert conn.tool_calls(mark) == 5


async def test_followers_share_the_leaders_failure(clock: FakeClock, cache: ToolCache) -> None:
    lab = Lab(rewrite=lambda result, meta: {**result, "_meta": "not an object"})
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        failures: list[BaseException] = []
        lab.gate = anyio.Event()

        async def one() -> None:
            try:
                await conn.call("gated", K)
            except Exception as exc:
                failures.append(exc)

        mark = conn.mark()
        async with anyio.create_task_group() as group:
            for _ in range(10):
                group.start_soon(one)
            await anyio.wait_all_tasks_blocked()
            lab.gate.set()
        assert conn.tool_calls(mark) == 1
    assert len(failures) == 10
    assert all("valid dictionary" in str(exc) for exc in failures)


async def test_when_the_leader_is_cancelled_a_follower_goes_on_its_own() -> None:
    """The leader's outcome is unknown once it is cancelled, so it ends freshness as a write would (this cache
    does not trust the tool's read-only annotation); a follower then sends a new request, after that end, and
    the others share it. The real clock: with a frozen one the new request would be sent at the very instant
    freshness ended, and none could share it."""
    cache = ToolCache(MemoryStore())
    lab = Lab()
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        lab.gate = anyio.Event()
        results: list[Any] = []
        leader_scope = anyio.CancelScope()

        async def leader() -> None:
            with leader_scope:
                await conn.call("gated", K)

        async def follower() -> None:
            results.append(await conn.call("gated", K))

        async with anyio.create_task_group() as group:
            group.start_soon(leader)
            await anyio.wait_all_tasks_blocked()
            for _ in range(3):
                group.start_soon(follower)
            await anyio.wait_all_tasks_blocked()
            leader_scope.cancel()
            await anyio.wait_all_tasks_blocked()
            lab.gate.set()
    assert len(results) == 3
    assert all(r.result.structured_content["text"] == "k: first edition" for r in results)
    assert sum(1 for r in results if not r.outcome.coalesced) == 1, "one follower took over, the others joined it"


async def test_a_call_that_cannot_read_the_store_never_joins_an_older_flight(clock: FakeClock) -> None:
    """Another cache on the same store ends freshness while a read is in flight; then the store stops
    answering this cache. Its next identical read cannot see that end, so it must not take the answer of
    the request sent before it: it sends its own (found by the concurrent model test under load)."""
    from .test_faults import BrokenStore

    store = BrokenStore(clock, set())
    here, elsewhere = ToolCache(store, clock=clock), ToolCache(store, clock=clock)
    lab = Lab()
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, here, server_id="lab") as conn:
        lab.gate = anyio.Event()
        results: list[Any] = []
        mark = conn.mark()
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: _append(results, conn.call("gated", K)))
            await anyio.wait_all_tasks_blocked()
            clock.advance(1)
            await elsewhere.end_freshness("lab")
            store.failing.add("load")
            clock.advance(1)
            group.start_soon(lambda: _append(results, conn.call("gated", K)))
            await anyio.wait_all_tasks_blocked()
            lab.gate.set()
        assert conn.tool_calls(mark) == 2, "the second read took the answer of a request sent before the end"
    assert [r.outcome.coalesced for r in results] == [False, False]


async def _append(results: list[Any], call: Any) -> None:
    results.append(await call)


async def test_a_cache_that_keeps_no_private_answers_shares_none_in_flight(clock: FakeClock) -> None:
    # keep_private=False: a partition answering principals it cannot tell apart (the gateway's anonymous
    # callers, who may each send upstream credentials of their own). `gated` answers private: each caller
    # gets its own answer from the server, none is handed another's, and none is kept.
    from mcpcache.stores import MemoryStore

    cache = ToolCache(MemoryStore(clock=clock), CacheSettings(keep_private=False), clock=clock)
    lab = Lab()
    async with connect("mcp", ServerTarget.memory(build_lab("sdk", lab)), MODERN, cache) as conn:
        mark = conn.mark()
        results = await all_at_once(conn, lab, [K] * 5)
        assert conn.tool_calls(mark) == 5
    assert not any(call.outcome.coalesced or call.outcome.stored for call in results)
    assert all("private answers are not kept" in call.outcome.reason for call in results)
    assert (await cache.store.usage()).items == 0
