"""Keeps one failed HTTP exchange from ending an MCP session over streamable HTTP.

The MCP SDK's streamable HTTP client (mcp 2.3.0, `StreamableHTTPTransport._handle_post_request`) lets an
`httpx2` error raised by a message's POST escape into the transport's task group
(modelcontextprotocol/python-sdk#3522, open). The group then cancels the transport and closes its
streams: the request in flight fails with `MCPError: Connection closed`, every later call on the session
fails (`fastmcp.Client` re-raises the transport's error, a `ReadError`), and the session never recovers.

The common trigger is no fault at all. Uvicorn (which FastMCP and `mcpcache gateway` serve on) closes a
keep-alive connection after 5 s idle, and the SDK's httpx2 pool reuses one for up to 5 s idle: a request
the pool sends on a connection in that moment reaches a socket the server has just closed, and comes back
as a connection reset (`ReadError` from `EPIPE`/`ECONNRESET`) before any answer. Sessions that make bursts
of concurrent calls with pauses between them meet it within a minute; steadier traffic, once in some
thousands of calls (benchmarks/session_load.py).

`install()` wraps the SDK's method so that:
- a request whose POST was reset before any answer is sent again on another connection (at most
  `MAX_RESENDS` times). A reset before any answer means the server closed the socket with the request
  unread: it never ran, so sending it again cannot run it twice (RFC 9110 9.2.2 allows a retry when the
  request is known not to have been applied; curl and browsers resend on a reused connection that dies
  before answering, for any method);
- any other `httpx2.RequestError` of a request's exchange fails that request alone, as a
  `CONNECTION_CLOSED` error (the SDK's own answer to an exchange lost in other ways), and the session goes on;
- a notification or an answer to the server whose POST fails is dropped with a warning (fire and forget,
  as the SDK's own `notify` is), rather than ending the session.

It is installed by `ToolCache.wrap()` and applies to every streamable HTTP session of the process, since
the SDK offers no per-session hook. tests/client/test_transport_guard.py fails when the SDK no longer needs
it (a stock session survives a reset) and when the private parts it wraps move.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import httpx2
from mcp.client.streamable_http import RequestContext, StreamableHTTPTransport
from mcp_types import JSONRPCRequest

logger = logging.getLogger("mcpcache.client")

MAX_RESENDS = 2
"""How many times one message is sent again after resets: a peer that resets every request costs a few
attempts, then the request fails (each reset is another pooled connection the server had closed)."""

_Handler = Callable[[StreamableHTTPTransport, RequestContext], Awaitable[None]]

SDK_HANDLE_POST_REQUEST: _Handler = StreamableHTTPTransport._handle_post_request
"""The SDK's own method, as imported (tests put it back to show what the guard is for)."""

_GUARD_MARK = "__mcpcache_transport_guard__"


def reset_before_answer(exc: BaseException) -> bool:
    """Whether `exc`, raised while a POST waited for its answer, is the peer resetting the connection.

    httpx2 raises `ReadError`/`WriteError` whose cause chain ends in the socket's own error. The kernel
    resets a connection when data arrives on a socket the server closed, or when the server closes one
    with data unread: either way the request was never read.
    """
    if not isinstance(exc, httpx2.ReadError | httpx2.WriteError):
        return False
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ConnectionResetError | BrokenPipeError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


class _ResendingClient:
    """The session's `httpx2.AsyncClient`, sending a request again when it was reset before any answer.

    Only `send` differs. With `stream=True` it returns as soon as the answer's headers are in, so anything
    it raises was raised before any answer began.
    """

    def __init__(self, client: httpx2.AsyncClient) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        resends = 0
        while True:
            try:
                return await self._client.send(request, **kwargs)
            except (httpx2.ReadError, httpx2.WriteError) as exc:
                if resends >= MAX_RESENDS or not reset_before_answer(exc):
                    raise
                resends += 1
                logger.debug(
                    "the server reset %s %s before answering (an idle connection it closed); sent again",
                    request.method,
                    request.url,
                )


async def _guarded_handle_post_request(self: StreamableHTTPTransport, ctx: RequestContext) -> None:
    message = ctx.session_message.message
    resending = dataclasses.replace(ctx, client=cast(httpx2.AsyncClient, _ResendingClient(ctx.client)))
    try:
        await SDK_HANDLE_POST_REQUEST(self, resending)
    except httpx2.RequestError as exc:
        why = f"HTTP request failed: {type(exc).__name__}: {exc}".rstrip(": ")
        if isinstance(message, JSONRPCRequest):
            # Private: the SDK's own way to fail one request whose answer can never arrive (it writes the
            # error where the waiting caller reads, and tolerates a session already closing).
            await self._resolve_abandoned_request(ctx.read_stream_writer, message.id, why)
        else:
            logger.warning("dropped a %s sent to the server: %s", type(message).__name__, why)


setattr(_guarded_handle_post_request, _GUARD_MARK, True)


def installed() -> bool:
    return bool(getattr(StreamableHTTPTransport._handle_post_request, _GUARD_MARK, False))


def install() -> None:
    """Guard every streamable HTTP session of this process (idempotent)."""
    if not installed():
        # Private: `_handle_post_request` is where the SDK makes one message's HTTP exchange, the narrowest
        # place that sees both the failure and the request it belongs to (tests/client/test_transport_guard.py).
        StreamableHTTPTransport._handle_post_request = _guarded_handle_post_request  # type: ignore[method-assign]
