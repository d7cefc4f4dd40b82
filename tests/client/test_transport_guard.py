"""One lost HTTP exchange costs at most that call, never the session (mcpcache/client/transport_guard.py),
and the call is never sent again by the guard; sessions nobody wrapped keep the SDK as shipped.

A real FastMCP server (the counting server: each answer says how many calls reached it) behind a TCP relay
(tests/support/relay.py) that loses the next request sent on a reused connection:
- reset unread: the connection is reset before the request is passed on, which is what a client meets when
  the server closes an idle keep-alive connection as the request arrives (uvicorn and the MCP SDK's httpx2
  pool both retire idle connections after 5 s, so it happens under ordinary load);
- reset after read: the request is passed on, and the connection reset as the answer begins (a proxy or load
  balancer whose upstream link dropped): the client sees the same reset, but the server ran the tool;
- dropped after read: the server reads the request and runs the tool, and the connection closes before the
  answer arrives.

Each is driven through a `ToolCache` wrapping the MCP SDK's `Client` and FastMCP's `Client` over streamable
HTTP, and once without mcpcache, which shows the guard is still needed: the day that test fails,
modelcontextprotocol/python-sdk#3522 is fixed upstream and the guard can go.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any

import fastmcp
import mcp
import mcp_types as mt
import pytest
from fastmcp.client.transports import StreamableHttpTransport
from gateway.conftest import served_in_thread
from gateway.counting_server import build_counting_server
from mcp.client.streamable_http import RequestContext, StreamableHTTPTransport, streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from support.relay import Loss, Relay

from mcpcache.client import ToolCache, transport_guard
from mcpcache.stores import MemoryStore
from mcpcache.wire_count import CountingTransport

pytestmark = pytest.mark.anyio

KINDS = ["mcp", "fastmcp"]


@pytest.fixture(scope="module")
def counting() -> Iterator[str]:
    with served_in_thread(build_counting_server()) as url:
        yield url


@pytest.fixture
async def relay(counting: str) -> AsyncIterator[tuple[Relay, str]]:
    port = int(counting.rsplit(":", 1)[1].split("/", 1)[0])
    relay = Relay("127.0.0.1", port)
    async with relay.running() as base:
        yield relay, f"{base}/mcp"


def client_of(kind: str, url: str) -> Any:
    return mcp.Client(url) if kind == "mcp" else fastmcp.Client(StreamableHttpTransport(url))


async def numbered(view: Any, kind: str, name: str) -> int:
    call = await (
        view.call("numbered_private", {"name": name})
        if kind == "mcp"
        else view.call_mcp("numbered_private", {"name": name})
    )
    result: mt.CallToolResult = call.result
    assert not result.is_error, result
    fetch: int = result.structured_content["fetch"]
    return fetch


async def stock_call(client: Any, kind: str, name: str) -> Any:
    if kind == "mcp":
        return await client.call_tool("numbered_private", {"name": name})
    return await client.call_tool_mcp("numbered_private", {"name": name})


@pytest.mark.parametrize("loss", ["reset_unread", "reset_after_read", "drop_after_read"])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_lost_exchange_fails_that_call_alone_is_never_sent_again_and_the_session_goes_on(
    kind: str, loss: Loss, relay: tuple[Relay, str]
) -> None:
    """Whether the server read the request or not, the client cannot tell from a reset: a request reset
    before any answer may have been forwarded (a proxy) or not (an idle connection the server closed). It
    fails, with one error, and is not sent again (the cache does not trust this server's annotations)."""
    lossy, url = relay
    async with client_of(kind, url) as client:
        view = ToolCache(MemoryStore()).wrap(client, server_id=f"guard-{kind}")
        first = await numbered(view, kind, "a")
        lossy.lose_next(loss)
        with pytest.raises(MCPError) as failed:
            await numbered(view, kind, "b")
        assert failed.value.code == mt.CONNECTION_CLOSED
        assert "HTTP request failed" in str(failed.value)
        assert "it may have reached the server, so it is not sent again" in str(failed.value)
        after = await numbered(view, kind, "c")
    assert lossy.lost == [loss]
    # The lost call ran once if the server read it, else never; and never twice.
    assert after == first + (1 if loss == "reset_unread" else 2)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_stock_session_still_dies_of_one_reset(kind: str, relay: tuple[Relay, str]) -> None:
    """What the guard is for. If this fails, the SDK contains the failure itself (python-sdk#3522 fixed):
    drop mcpcache/client/transport_guard.py and this file's guard-specific tests."""
    lossy, url = relay
    failures = await _calls_after_a_reset(kind, url, lossy)
    assert lossy.lost == ["reset_unread"]
    assert failures, "a reset no longer ends a stock session: python-sdk#3522 looks fixed; the guard can go"


async def _calls_after_a_reset(kind: str, url: str, lossy: Relay) -> list[BaseException]:
    """A session nobody wrapped: one call, a reset, two more calls; what failed."""
    failures: list[BaseException] = []
    try:
        async with client_of(kind, url) as client:
            await stock_call(client, kind, "a")
            lossy.lose_next("reset_unread")
            for name in ("b", "c"):
                try:
                    await stock_call(client, kind, name)
                except Exception as exc:
                    failures.append(exc)
    except BaseException as exc:  # the SDK's Client re-raises the transport's error on the way out
        failures.append(exc)
    return failures


@pytest.mark.parametrize("kind", KINDS)
async def test_a_session_nobody_wrapped_sees_the_sdk_as_shipped_beside_a_guarded_one(
    kind: str, relay: tuple[Relay, str], counting: str
) -> None:
    """The guard is the wrapped session's alone: the SDK's class is untouched, and a session of the same
    process that was never wrapped dies of a reset exactly as without mcpcache, while the wrapped one
    survives one."""
    lossy, url = relay
    async with client_of(kind, url) as guarded_client:
        view = ToolCache(MemoryStore()).wrap(guarded_client, server_id=f"guard-beside-{kind}")
        await numbered(view, kind, "a")
        assert transport_guard.transport_of(view.session) is not None
        assert StreamableHTTPTransport._handle_post_request is transport_guard.SDK_HANDLE_POST_REQUEST
        failures = await _calls_after_a_reset(kind, url, lossy)
        assert failures, "a session nobody wrapped survived a reset: something guards it"
        lossy.lose_next("reset_unread")
        with pytest.raises(MCPError):
            await numbered(view, kind, "b")
        await numbered(view, kind, "c")  # the wrapped session goes on
    assert lossy.lost == ["reset_unread", "reset_unread"]


async def test_a_session_whose_streams_are_wrapped_is_found_through_what_they_wrap(counting: str) -> None:
    """A stream handed on by a wrapper (here mcpcache's own message counter) names it `__wrapped__`."""
    async with mcp.Client(CountingTransport(streamable_http_client(counting))) as client:
        view = ToolCache(MemoryStore()).wrap(client, server_id="counted")
        await numbered(view, "mcp", "a")
        assert transport_guard.transport_of(view.session) is not None


async def test_a_session_over_another_transport_is_left_alone(counting: str) -> None:
    """stdio and in-memory sessions have no HTTP exchange to guard: nothing is found, nothing replaced."""
    server = fastmcp.FastMCP("in-memory")

    @server.tool
    def ping() -> str:
        return "pong"

    async with fastmcp.Client(server) as client:
        view = ToolCache(MemoryStore()).wrap(client, server_id="in-memory")
        assert (await view.call_mcp("ping", {})).result.structured_content == {"result": "pong"}
        assert transport_guard.transport_of(view.session) is None


def test_the_sdk_method_the_guard_wraps_is_where_it_expects() -> None:
    """Private parts of the SDK the guard relies on (mcp 2.3.0)."""
    original = transport_guard.SDK_HANDLE_POST_REQUEST
    assert getattr(original, "__qualname__", "") == "StreamableHTTPTransport._handle_post_request"
    assert list(inspect.signature(original).parameters) == ["self", "ctx"]
    # Where the guard finds a session's transport: the task running its writer, holding the session's stream.
    writer = inspect.signature(StreamableHTTPTransport.post_writer)
    assert list(writer.parameters)[:5] == [
        "self",
        "client",
        "write_stream_reader",
        "read_stream_writer",
        "write_stream",
    ]
    assert "self._handle_post_request(ctx)" in inspect.getsource(StreamableHTTPTransport.post_writer)
    assert "self._write_stream = write_stream" in inspect.getsource(JSONRPCDispatcher.__init__)
    fields = {field for field in RequestContext.__dataclass_fields__}
    assert {"client", "session_message", "read_stream_writer"} <= fields
    resolve = inspect.signature(StreamableHTTPTransport._resolve_abandoned_request)
    assert list(resolve.parameters)[:4] == ["self", "read_stream_writer", "request_id", "message"]
