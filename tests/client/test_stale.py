"""Serving stale (docs/protocol.md section 12; docs/client.md, "Serving stale"), against a real FastMCP server
(tests/fixture_servers/stale.py) that declares its windows with `cache_meta`, through each client view over
memory streams, with the injected clock moving the entries past their freshness.

- stale-while-revalidate: served at once, revalidated in the background, one request per entry however
  many callers read it at once, at most `background_revalidations` at once, cancelled by `close()`; its
  failure never reaches anybody;
- stale-if-error: served when the server answers a JSON-RPC error (a middleware of the FastMCP server, a tool
  of the MCP SDK's `MCPServer`) or times out; a tool's own `isError` answer is returned as it came;
- never after a write ended freshness (a mutating call, `invalidate`), whatever the windows say.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from fixture_servers.stale import SIE_MS, SWR_MS, TTL_MS, StaleLab, build_stale_server
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from stores.backends import Backend, clock_of
from support.transports import MODERN, ServerTarget

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.protocol import META_KEY
from mcpcache.server import CachePolicy, ToolPolicies
from mcpcache.server.sdk import RevalidationExtension
from mcpcache.stores import MemoryStore, Store

from .harness import VIEW_KINDS, Conn, FakeClock, ViewKind, connect

pytestmark = pytest.mark.anyio

K = {"key": "k"}
TTL_S = TTL_MS / 1000
WITHIN_SWR = TTL_S + SWR_MS / 1000 / 2
"""How far past its receipt an entry is stale, and within its stale-while-revalidate window."""
PAST_SWR = TTL_S + SWR_MS / 1000 + 1
"""Past the stale-while-revalidate window, within the stale-if-error one."""
PAST_SIE = TTL_S + SIE_MS / 1000 + 1
SERVER_ID = "stale-lab"
GUARD_S = 20
"""A bound on waits for the server or the background, against a hang: never a timing assertion."""


@contextlib.asynccontextmanager
async def stale_lab(
    view_kind: ViewKind, cache: ToolCache, lab: StaleLab | None = None
) -> AsyncIterator[tuple[Conn, StaleLab]]:
    lab = lab if lab is not None else StaleLab()
    target = ServerTarget.memory(build_stale_server(lab))
    async with connect(view_kind, target, MODERN, cache, server_id=SERVER_ID) as conn:
        yield conn, lab


def text(call: Any) -> str:
    return str(call.result.structured_content["text"])


def change_behind_the_caches_back(lab: StaleLab, key: str, new: str) -> None:
    lab.texts[key] = new
    lab.versions[key] += 1


async def until(condition: Any) -> None:
    with anyio.fail_after(GUARD_S):
        while not condition():  # noqa: ASYNC110 - the server's state has no event to wait on
            await anyio.sleep(0.005)


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_stale_while_revalidate_serves_at_once_and_revalidates_in_the_background(
    view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    async with stale_lab(view_kind, cache) as (conn, lab):
        first = await conn.call("read", K)
        assert first.outcome.status == "miss"
        block = first.result.meta[META_KEY]  # type: ignore[index]
        assert block["staleWhileRevalidateMs"] == SWR_MS
        assert block["staleIfErrorMs"] == SIE_MS

        # Unchanged: served at once, and the background revalidation's not-modified restarts freshness.
        clock.advance(WITHIN_SWR)
        mark = conn.mark()
        stale = await conn.call("read", K)
        assert stale.outcome.status == "stale_while_revalidate", stale.outcome.reason
        assert "revalidating in the background" in stale.outcome.reason
        assert text(stale) == "k: first"
        assert stale.outcome.bytes_saved == 0
        await cache.flush()
        assert conn.tool_calls(mark) == 1
        assert (await conn.call("read", K)).outcome.status == "fresh_hit"

        # Changed behind the cache's back: the stale answer is served once more, the new one after.
        change_behind_the_caches_back(lab, "k", "k: second")
        clock.advance(WITHIN_SWR)
        stale = await conn.call("read", K)
        assert stale.outcome.status == "stale_while_revalidate"
        assert text(stale) == "k: first"
        await cache.flush()
        fresh = await conn.call("read", K)
        assert fresh.outcome.status == "fresh_hit"
        assert text(fresh) == "k: second"
    assert cache.stats.stale_while_revalidate == 2
    assert cache.stats.background_revalidations == 2
    assert cache.stats.background_failures == 0


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_many_callers_of_a_stale_entry_at_once_cause_one_request(
    view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    callers = 24
    async with stale_lab(view_kind, cache) as (conn, lab):
        assert (await conn.call("gated", K)).outcome.status == "miss"
        clock.advance(WITHIN_SWR)
        lab.gate = anyio.Event()  # the background revalidation waits in the tool's body until the test says
        mark = conn.mark()
        outcomes: list[str] = []

        async def caller() -> None:
            call = await conn.call("gated", K)
            outcomes.append(call.outcome.status)

        with anyio.fail_after(GUARD_S):  # every caller is answered while the revalidation is held up
            async with anyio.create_task_group() as group:
                for _ in range(callers):
                    group.start_soon(caller)
        assert outcomes == ["stale_while_revalidate"] * callers
        await until(lambda: lab.entered >= 2)
        lab.gate.set()
        await cache.flush()
        assert conn.tool_calls(mark) == 1
        assert lab.entered == lab.runs["gated"] == 2
        assert cache.stats.background_revalidations == 1

        # And a second wave, at once again, finds the revalidated entry fresh.
        outcomes.clear()
        async with anyio.create_task_group() as group:
            for _ in range(callers):
                group.start_soon(caller)
        assert outcomes == ["fresh_hit"] * callers
        assert conn.tool_calls(mark) == 1


async def test_past_the_window_the_call_revalidates_in_the_foreground(clock: FakeClock, cache: ToolCache) -> None:
    async with stale_lab("mcp", cache) as (conn, _):
        await conn.call("read", K)
        clock.advance(PAST_SWR)
        call = await conn.call("read", K)
    assert call.outcome.status == "revalidated"
    assert cache.stats.background_revalidations == 0


async def test_without_a_tag_the_entry_is_kept_for_its_window_and_fetched_in_the_background(
    clock: FakeClock, store: MemoryStore, cache: ToolCache
) -> None:
    # A tagless entry was kept only until its ttl ran out (nothing to revalidate with): the store dropped
    # it before any window could be used. It is kept for its windows now.
    async with stale_lab("mcp", cache) as (conn, lab):
        await conn.call("untagged", K)
        change_behind_the_caches_back(lab, "k", "k: second")
        clock.advance(WITHIN_SWR)
        stale = await conn.call("untagged", K)
        assert stale.outcome.status == "stale_while_revalidate"
        assert text(stale) == "k: first"
        await cache.flush()
        fresh = await conn.call("untagged", K)
    assert fresh.outcome.status == "fresh_hit"
    assert text(fresh) == "k: second"


async def test_a_cache_told_not_to_never_serves_stale(clock: FakeClock, store: MemoryStore) -> None:
    cache = ToolCache(store, CacheSettings(serve_stale=False), clock=clock)
    async with stale_lab("mcp", cache) as (conn, lab):
        await conn.call("read", K)
        clock.advance(WITHIN_SWR)
        assert (await conn.call("read", K)).outcome.status == "revalidated"
        clock.advance(PAST_SWR)
        lab.json_rpc_error = True
        with pytest.raises(MCPError):
            await conn.call("read", K)


# Read-your-writes wins -------------------------------------------------------------------------


@pytest.mark.parametrize("write", ["mutating call", "invalidate"])
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_write_ends_freshness_and_the_entry_is_never_served_stale(
    view_kind: ViewKind, write: str, clock: FakeClock, cache: ToolCache
) -> None:
    async with stale_lab(view_kind, cache) as (conn, lab):
        await conn.call("read", K)
        clock.advance(WITHIN_SWR)  # within both windows from here on
        if write == "mutating call":
            assert not (await conn.call("edit", {"key": "k", "text": "k: edited"})).result.is_error
        else:
            change_behind_the_caches_back(lab, "k", "k: edited")
            await conn.view.invalidate("read", K)
        clock.advance(0.001)  # a request sent at the very instant of the write cannot be ordered after it
        after = await conn.call("read", K)
        assert after.outcome.status in ("revalidated", "miss"), after.outcome.reason
        assert text(after) == "k: edited"

        # Nor in place of a server that fails: the write's answer is what the caller must see, or the failure.
        await conn.call("edit", {"key": "k", "text": "k: edited again"})
        clock.advance(0.001)
        lab.json_rpc_error = True
        with pytest.raises(MCPError):
            await conn.call("read", K)
    assert cache.stats.stale_while_revalidate == 0
    assert cache.stats.stale_if_error == 0


async def test_a_write_while_a_background_revalidation_is_out_is_read_by_the_next_call(
    clock: FakeClock, cache: ToolCache
) -> None:
    async with stale_lab("mcp", cache) as (conn, lab):
        await conn.call("gated", K)
        clock.advance(WITHIN_SWR)
        lab.gate = anyio.Event()
        assert (await conn.call("gated", K)).outcome.status == "stale_while_revalidate"
        await until(lambda: lab.entered == 2)  # the background request is out, sent before the write
        await conn.call("edit", {"key": "k", "text": "k: edited"})
        clock.advance(0.001)
        results: list[Any] = []

        async def read_after_the_write() -> None:
            results.append(await conn.call("gated", K))

        async with anyio.create_task_group() as group:
            group.start_soon(read_after_the_write)
            await until(lambda: lab.entered == 3)  # its own request: neither stale nor sharing the old one
            lab.gate.set()
        await cache.flush()
    assert results[0].outcome.status in ("revalidated", "miss")
    assert text(results[0]) == "k: edited"


# Stale-if-error ---------------------------------------------------------------------------------


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_json_rpc_error_is_answered_with_the_stored_answer_within_the_window(
    view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    async with stale_lab(view_kind, cache) as (conn, lab):
        first = await conn.call("read", K)
        clock.advance(PAST_SWR)
        lab.json_rpc_error = True
        served = await conn.call("read", K)
        assert served.outcome.status == "stale_if_error"
        assert "JSON-RPC error" in served.outcome.reason
        assert "backing service is down" in served.outcome.reason
        assert served.result.content == first.result.content
        assert not served.result.is_error
        assert cache.stats.stale_if_error == 1

        clock.advance(PAST_SIE)
        with pytest.raises(MCPError, match="backing service is down"):
            await conn.call("read", K)

        # Without a stale-if-error window (a tool that grants only stale-while-revalidate... or none), the
        # error is the caller's.
        lab.json_rpc_error = False
        await conn.call("fallback", K)
        clock.advance(PAST_SIE)
        lab.json_rpc_error = True
        with pytest.raises(MCPError):
            await conn.call("fallback", K)


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_a_tools_own_error_answer_is_returned_never_replaced(
    view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    async with stale_lab(view_kind, cache) as (conn, lab):
        assert (await conn.call("flaky", K)).outcome.status == "miss"
        clock.advance(PAST_SWR)
        lab.failing = True
        failed = await conn.call("flaky", K)
        assert failed.result.is_error
        assert "unavailable right now" in str(failed.result.content)
        assert failed.outcome.status == "miss"
        lab.failing = False
        again = await conn.call("flaky", K)  # the stored answer was kept: revalidated with its tag
    assert again.outcome.status == "revalidated"
    assert not again.result.is_error
    assert cache.stats.stale_if_error == 0


async def test_a_timeout_is_answered_with_the_stored_answer(clock: FakeClock, cache: ToolCache) -> None:
    async with stale_lab("mcp", cache) as (conn, lab):
        await conn.call("gated", K)
        clock.advance(PAST_SWR)
        lab.gate = anyio.Event()  # the server does not answer in time
        served = await conn.call("gated", K, read_timeout_seconds=0.3)
        lab.gate.set()
    assert served.outcome.status == "stale_if_error"
    assert "timed out" in served.outcome.reason
    assert text(served) == "k: first"


async def test_a_failing_background_revalidation_reaches_nobody(clock: FakeClock, cache: ToolCache) -> None:
    async with stale_lab("mcp", cache) as (conn, lab):
        await conn.call("read", K)
        clock.advance(WITHIN_SWR)
        lab.json_rpc_error = True
        stale = await conn.call("read", K)
        await cache.flush()
        assert cache.stats.background_failures == 1
        # The entry is as it was: still served stale while the window lasts, and the next revalidation works.
        lab.json_rpc_error = False
        assert (await conn.call("read", K)).outcome.status == "stale_while_revalidate"
        await cache.flush()
        assert (await conn.call("read", K)).outcome.status == "fresh_hit"
    assert stale.outcome.status == "stale_while_revalidate"
    assert text(stale) == "k: first"


# The background's bounds ------------------------------------------------------------------------


async def test_past_its_bound_the_background_leaves_the_revalidation_to_the_call(
    clock: FakeClock, store: MemoryStore
) -> None:
    cache = ToolCache(store, CacheSettings(background_revalidations=1), clock=clock)
    async with stale_lab("mcp", cache) as (conn, lab):
        await conn.call("gated", {"key": "a"})
        await conn.call("gated", {"key": "b"})
        clock.advance(WITHIN_SWR)
        lab.gate = anyio.Event()
        assert (await conn.call("gated", {"key": "a"})).outcome.status == "stale_while_revalidate"
        await until(lambda: lab.entered == 3)
        results: list[Any] = []

        async def read_b() -> None:
            results.append(await conn.call("gated", {"key": "b"}))

        async with anyio.create_task_group() as group:
            group.start_soon(read_b)
            await until(lambda: lab.entered == 4)
            lab.gate.set()
        await cache.flush()
    assert results[0].outcome.status == "revalidated"
    assert cache.stats.background_revalidations == 1


async def test_close_cancels_a_background_revalidation_in_flight(clock: FakeClock, store: MemoryStore) -> None:
    cache = ToolCache(store, clock=clock)
    async with stale_lab("mcp", cache) as (conn, lab):
        await conn.call("gated", K)
        clock.advance(WITHIN_SWR)
        lab.gate = anyio.Event()
        stale = await conn.call("gated", K)
        await until(lambda: lab.entered == 2)
        with anyio.fail_after(GUARD_S):
            await cache.close()  # returns although the server never answers; raises nothing
        assert cache.stats.background_failures == 1
        await cache.flush()  # nothing left to wait for
        lab.gate.set()
        # The cache is usable still (the store was the caller's): the entry is as it was.
        again = await conn.call("gated", K)
        await cache.flush()
    assert stale.outcome.status == again.outcome.status == "stale_while_revalidate"


# Every store ------------------------------------------------------------------------------------


async def test_serving_stale_on_every_store(backend: Backend, opened: Store) -> None:
    clock = clock_of(backend)
    cache = ToolCache(opened, clock=clock)
    writer = ToolCache(opened, clock=clock)  # another cache on the same store: its write reaches this one
    async with stale_lab("mcp", cache) as (conn, lab):
        await conn.call("read", K)
        clock.advance(WITHIN_SWR)
        assert (await conn.call("read", K)).outcome.status == "stale_while_revalidate"
        await cache.flush()
        assert (await conn.call("read", K)).outcome.status == "fresh_hit"

        clock.advance(PAST_SWR)
        lab.json_rpc_error = True
        assert (await conn.call("read", K)).outcome.status == "stale_if_error"
        lab.json_rpc_error = False

        target = ServerTarget.memory(build_stale_server(lab))
        async with connect("mcp", target, MODERN, writer, server_id=SERVER_ID) as other:
            clock.advance(0.001)
            await other.call("edit", {"key": "k", "text": "k: edited"})
        clock.advance(0.001)
        after = await conn.call("read", K)
    assert after.outcome.status in ("revalidated", "miss")
    assert text(after) == "k: edited"


# A tool of the MCP SDK's own server that raises a JSON-RPC error ---------------------------------


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_an_sdk_tool_raising_a_json_rpc_error_is_answered_with_the_stored_answer(
    view_kind: ViewKind, clock: FakeClock, cache: ToolCache
) -> None:
    # FastMCP turns an exception a tool raises (an `MCPError` too) into an `isError` answer; the MCP SDK's
    # `MCPServer` sends a tool's `MCPError` as the call's JSON-RPC error.
    down = {"now": False}

    def read(key: str) -> dict[str, Any]:
        if down["now"]:
            raise MCPError(code=-32603, message="the index is being rebuilt")
        return {"kind": "doc", "key": key, "text": f"{key}: first"}

    policy = CachePolicy(ttl_ms=TTL_MS, stale_if_error_ms=SIE_MS)
    sdk = MCPServer("stale-sdk", extensions=[RevalidationExtension(ToolPolicies({"read": policy}))])
    sdk.add_tool(read)
    async with connect(view_kind, ServerTarget.memory(sdk), MODERN, cache, server_id="stale-sdk") as conn:
        stored = await conn.call("read", K)
        clock.advance(PAST_SWR)
        down["now"] = True
        served = await conn.call("read", K)
        assert served.outcome.status == "stale_if_error"
        assert "index is being rebuilt" in served.outcome.reason
        assert served.result.content == stored.result.content
        clock.advance(PAST_SIE)
        with pytest.raises(MCPError, match="index is being rebuilt"):
            await conn.call("read", K)
