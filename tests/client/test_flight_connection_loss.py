"""A leader whose connection is lost does not fail the followers that wait on it from other sessions.

One `ToolCache` serves two sessions to the same server (named alike with `server_id`), as an application
with a pool of connections does. A call on session A leads a flight; an identical call on session B joins
it. A's connection then loses the answer (a TCP relay closes it after the server read the request:
tests/support/relay.py): A's call fails with `CONNECTION_CLOSED`, which says nothing about the server's
answer, only about A's connection. B's session is healthy, so B must get the answer, by sending its own
request, never A's connection error.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import anyio
import fastmcp
import mcp_types as mt
import pytest
from fastmcp.client.transports import StreamableHttpTransport
from gateway.conftest import served_in_thread
from mcp.shared.exceptions import MCPError
from support.relay import Relay

from mcpcache.client import ToolCache
from mcpcache.stores import MemoryStore

pytestmark = pytest.mark.anyio


class GatedServer:
    """A FastMCP server whose `slow` tool waits for the test to open a gate, and counts its runs."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.runs = 0
        self.server: fastmcp.FastMCP[Any] = fastmcp.FastMCP("gated")

        @self.server.tool(annotations={"readOnlyHint": True})
        async def slow(key: str) -> dict[str, Any]:
            self.runs += 1
            self.entered.set()
            await anyio.to_thread.run_sync(self.gate.wait)
            return {"key": key, "run": self.runs}

        @self.server.tool(annotations={"readOnlyHint": True})
        def ping() -> str:
            return "pong"


@pytest.fixture
def gated() -> Iterator[tuple[GatedServer, str]]:
    server = GatedServer()
    with served_in_thread(server.server) as url:
        yield server, url


async def test_a_follower_on_a_healthy_session_outlives_its_leaders_lost_connection(
    gated: tuple[GatedServer, str],
) -> None:
    server, url = gated
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    relay = Relay("127.0.0.1", port)
    cache = ToolCache(MemoryStore())
    async with (
        relay.running() as base,
        fastmcp.Client(StreamableHttpTransport(f"{base}/mcp")) as lossy,
        fastmcp.Client(StreamableHttpTransport(url)) as healthy,
    ):
        leader_view = cache.wrap(lossy, server_id="gated")
        follower_view = cache.wrap(healthy, server_id="gated")
        # One exchange each first: the relay loses a request on a reused connection, and both views learn the
        # tools' annotations (a read-only tool's identical calls share a request).
        assert (await leader_view.call_mcp("ping", {})).result.structured_content == {"result": "pong"}
        assert (await follower_view.call_mcp("ping", {})).result.structured_content == {"result": "pong"}
        relay.lose_next("drop_after_read")

        outcomes: dict[str, Any] = {}

        async def call(name: str, view: Any) -> None:
            try:
                outcomes[name] = await view.call_mcp("slow", {"key": "k"})
            except MCPError as exc:
                outcomes[name] = exc

        async with anyio.create_task_group() as group:
            group.start_soon(call, "leader", leader_view)
            await anyio.to_thread.run_sync(server.entered.wait, 30)  # the leader's request reached the tool
            group.start_soon(call, "follower", follower_view)
            for _ in range(500):  # until the follower waits on the leader's flight (bounded: 5 s)
                flight = next(iter(cache._flights._by_key.values()), None)
                if flight is not None and flight.waiting:
                    break
                await anyio.sleep(0.01)
            server.gate.set()

    assert relay.lost == ["drop_after_read"]
    leader, follower = outcomes["leader"], outcomes["follower"]
    assert isinstance(leader, MCPError)
    assert leader.code == mt.CONNECTION_CLOSED
    # The follower was never handed the leader's connection error: it asked for itself, on its own session.
    assert not isinstance(follower, MCPError), follower
    assert follower.result.structured_content == {"key": "k", "run": 2}
    assert not follower.outcome.coalesced
