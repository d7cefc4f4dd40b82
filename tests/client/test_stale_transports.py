"""Serving stale over the real transports, through each client view: streamable HTTP (a server in a thread of
this process, which answers JSON-RPC errors on demand, and which the test then stops) and stdio (a server
process the test kills). tests/client/test_stale_processes.py kills an HTTP server process under two
processes sharing a store.

The MCP SDK's streamable HTTP client (2.3.0) ends its whole session when a POST fails at the HTTP level,
cancelling the caller; `wrap()` guards that transport so the failed call alone fails, with
`CONNECTION_CLOSED` (docs/client.md, "Failures"), and that failure is what stale-if-error answers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import anyio
import pytest
import uvicorn
from fixture_servers.stale import SCRIPT as STALE_SERVER
from fixture_servers.stale import StaleLab, build_stale_server
from gateway.conftest import served_in_thread
from mcp.shared.exceptions import MCPError
from support.transports import MODERN, ServerTarget

from mcpcache.client import ToolCache
from mcpcache.processes import free_port
from mcpcache.stores import MemoryStore

from .harness import VIEW_KINDS, FakeClock, ViewKind, connect
from .test_stale import PAST_SIE, PAST_SWR, WITHIN_SWR

pytestmark = pytest.mark.anyio

K = {"key": "k"}


@pytest.fixture
def over_http() -> Iterator[tuple[StaleLab, str]]:
    lab = StaleLab()
    with served_in_thread(build_stale_server(lab)) as url:
        yield lab, url


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_over_http(view_kind: ViewKind, over_http: tuple[StaleLab, str], clock: FakeClock) -> None:
    lab, url = over_http
    cache = ToolCache(MemoryStore(clock=clock), clock=clock)
    async with connect(view_kind, ServerTarget.http("fastmcp", url), MODERN, cache) as conn:
        await conn.call("read", K)
        clock.advance(WITHIN_SWR)
        mark = conn.mark()
        assert (await conn.call("read", K)).outcome.status == "stale_while_revalidate"
        await cache.flush()
        assert conn.tool_calls(mark) == 1
        assert (await conn.call("read", K)).outcome.status == "fresh_hit"

        clock.advance(PAST_SWR)
        lab.json_rpc_error = True
        served = await conn.call("read", K)
        assert served.outcome.status == "stale_if_error"
        assert "JSON-RPC error" in served.outcome.reason
        clock.advance(PAST_SIE)
        with pytest.raises(MCPError):
            await conn.call("read", K)
        # The connection is as good as before: the server's errors were answers, not a lost connection.
        lab.json_rpc_error = False
        assert (await conn.call("read", K)).outcome.status == "revalidated"


@pytest.mark.slow
@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_over_stdio_with_the_server_killed(view_kind: ViewKind, clock: FakeClock) -> None:
    cache = ToolCache(MemoryStore(clock=clock), clock=clock)
    target = ServerTarget.stdio("fastmcp", STALE_SERVER, "stdio", "1000")
    async with connect(view_kind, target, MODERN, cache) as conn:
        stored = await conn.call("fallback", K)
        pid = (await conn.direct("pid", {})).structured_content["result"]  # type: ignore[index]
        os.kill(pid, signal.SIGKILL)  # the server this test's client started, by its id
        clock.advance(PAST_SWR)
        with anyio.fail_after(60):  # against a hang only
            served = await conn.call("fallback", K)
    assert served.outcome.status == "stale_if_error", served.outcome.reason
    assert "connection" in served.outcome.reason
    assert served.result.content == stored.result.content


@contextlib.contextmanager
def stoppable(lab: StaleLab) -> Iterator[tuple[str, Callable[[], None]]]:
    """The stale-lab server over streamable HTTP in a thread of this process, and a function that stops it."""
    port = free_port()
    app = build_stale_server(lab).http_app(path="/mcp")
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1)
    runner = uvicorn.Server(config)
    thread = threading.Thread(target=runner.run, name=f"stale-lab-{port}", daemon=True)
    thread.start()

    def stop() -> None:
        runner.should_exit = True
        thread.join(timeout=60)
        assert not thread.is_alive(), "the server did not stop"

    try:
        deadline = time.monotonic() + 60  # a readiness check, not a timing assertion
        while not runner.started:
            assert thread.is_alive(), "the server exited before it started"
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}/mcp", stop
    finally:
        stop()


@pytest.mark.parametrize("view_kind", VIEW_KINDS)
async def test_over_http_with_the_server_stopped(view_kind: ViewKind, clock: FakeClock) -> None:
    cache = ToolCache(MemoryStore(clock=clock), clock=clock)
    with stoppable(StaleLab()) as (url, stop):
        async with connect(view_kind, ServerTarget.http("fastmcp", url), MODERN, cache) as conn:
            stored = await conn.call("fallback", K)
            await anyio.to_thread.run_sync(stop)
            clock.advance(PAST_SWR)
            with anyio.fail_after(60):  # against a hang only
                served = await conn.call("fallback", K)
            assert served.outcome.status == "stale_if_error", served.outcome.reason
            assert served.result.content == stored.result.content
            clock.advance(PAST_SIE)
            with pytest.raises(MCPError):
                await conn.call("fallback", K)
