"""Serving stale over the real transports: streamable HTTP (a server in a thread of this process that answers
JSON-RPC errors on demand) and stdio (a server process the test kills), through the client views.

Over HTTP a server that stops answering altogether is covered by tests/client/test_stale_processes.py (a
`fastmcp.Client`, the server killed). The MCP SDK's own `mcp.Client` over streamable HTTP cannot be helped
there: when the server goes away its transport task fails and the SDK cancels the caller's whole scope
(docs/client.md, "Serving stale"), so no call returns, stale or otherwise.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import anyio
import pytest
from fixture_servers.stale import SCRIPT as STALE_SERVER
from fixture_servers.stale import StaleLab, build_stale_server
from gateway.conftest import served_in_thread
from mcp.shared.exceptions import MCPError
from support.transports import MODERN, ServerTarget

from mcpcache.client import ToolCache
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
