"""Keeps one failed HTTP exchange from ending an MCP session over streamable HTTP, in the sessions the cache
calls through and no others.

The MCP SDK's streamable HTTP client (mcp 2.3.0, `StreamableHTTPTransport._handle_post_request`) lets an
`httpx2` error raised by a message's POST escape into the transport's task group
(modelcontextprotocol/python-sdk#3522, open). The group then cancels the transport and closes its
streams: the request in flight fails with `MCPError: Connection closed`, every later call on the session
fails (`fastmcp.Client` re-raises the transport's error, a `ReadError`), and the session never recovers.

The common trigger is no fault at all. Uvicorn (which FastMCP and `mcpcache gateway` serve on) closes a
keep-alive connection after 5 s idle, and the SDK's httpx2 pool reuses one for up to 5 s idle: a request
the pool sends on a connection in that moment comes back as a connection reset before any answer. Sessions
that make bursts of concurrent calls with pauses between them meet it within a minute; steadier traffic,
once in some thousands of calls (benchmarks/session_load.py).

`guard_session(session)` replaces that method on the one transport instance the session sends through, so:
- a request whose exchange fails in any way (a reset, a connection closed before or during the answer, a
  timeout) fails alone, as a `CONNECTION_CLOSED` error (the SDK's own answer to an exchange it lost), and
  the session goes on. It is never sent again here: a reset before any answer is no proof that the server
  never read the request (a proxy or load balancer resets the client's connection after forwarding it), so
  only `mcpcache.client.resend` may send it again, for a tool a trusted server annotated read-only or
  idempotent;
- a notification or an answer to the server whose POST fails is dropped with a warning, never sent again
  (it may have arrived; the SDK's own `notify` is fire and forget), rather than ending the session.

Nothing else changes: the SDK's class is left as shipped, so a session nobody wrapped behaves exactly as
without mcpcache. The SDK offers no per-session hook, and the transport instance is reachable only from the
task that runs its `post_writer` (found by the session's write stream, which that task holds, or the stream
that one wraps as `__wrapped__`). Private parts
of the SDK, checked by name in tests/client/test_transport_guard.py, which also fails when the SDK no longer
needs this (a stock session survives a reset).
"""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import RequestContext, StreamableHTTPTransport
from mcp_types import JSONRPCRequest

logger = logging.getLogger("mcpcache.client")

_Handler = Callable[[StreamableHTTPTransport, RequestContext], Awaitable[None]]

SDK_HANDLE_POST_REQUEST: _Handler = StreamableHTTPTransport._handle_post_request
"""The SDK's own method, as shipped (the class keeps it; a guarded transport calls it)."""

_GUARD_MARK = "__mcpcache_transport_guard__"
_AWAIT_DEPTH = 8
"""How far down a task's chain of awaits the transport's writer is looked for (anyio wraps it once)."""


def _failure_text(exc: httpx2.RequestError) -> str:
    # httpx2 often raises with no text of its own (a reset is a bare `ReadError`): the socket's error it was
    # raised from says what happened.
    said: BaseException | None = exc
    seen: set[int] = set()
    while said is not None and not str(said) and id(said) not in seen:
        seen.add(id(said))
        said = said.__cause__ or said.__context__
    what = type(exc).__name__ + (f": {said}" if said is not None and str(said) else "")
    return f"HTTP request failed ({what}); it may have reached the server, so it is not sent again"


async def _guarded_handle_post_request(self: StreamableHTTPTransport, ctx: RequestContext) -> None:
    message = ctx.session_message.message
    try:
        await SDK_HANDLE_POST_REQUEST(self, ctx)
    except httpx2.RequestError as exc:
        why = _failure_text(exc)
        if isinstance(message, JSONRPCRequest):
            # Private: the SDK's own way to fail one request whose answer can never arrive (it writes the
            # error where the waiting caller reads, and tolerates a session already closing).
            await self._resolve_abandoned_request(ctx.read_stream_writer, message.id, why)
        else:
            logger.warning("dropped a %s sent to the server: %s", type(message).__name__, why)


setattr(_guarded_handle_post_request, _GUARD_MARK, True)


def guarded(transport: StreamableHTTPTransport) -> bool:
    """Whether `transport` (this instance, not its class) is guarded."""
    return bool(getattr(transport.__dict__.get("_handle_post_request"), _GUARD_MARK, False))


def guard(transport: StreamableHTTPTransport) -> None:
    """Guard this one transport (idempotent); its class, and every other transport, stay as shipped."""
    if not guarded(transport):
        method = types.MethodType(_guarded_handle_post_request, transport)
        # Private: the SDK looks the method up on the instance for every message (`post_writer`), so an
        # instance attribute replaces it for this transport alone.
        transport._handle_post_request = method  # type: ignore[method-assign]


def transport_of(session: ClientSession) -> StreamableHTTPTransport | None:
    """The streamable HTTP transport `session` sends through, or None (another transport, or none found).

    Private: the session's dispatcher keeps the stream it writes to, and the transport's `post_writer` task
    reads that stream's other end holding the same send stream as its `write_stream` argument; the task is
    found among the event loop's tasks, the transport as its `self`.
    """
    dispatcher = getattr(session, "_dispatcher", None)
    stream = getattr(dispatcher, "_write_stream", None)
    # A stream handed on by a wrapper (one that counts the messages, say) names what it wraps `__wrapped__`.
    streams: set[int] = set()
    while stream is not None and id(stream) not in streams and len(streams) < _AWAIT_DEPTH:
        streams.add(id(stream))
        stream = getattr(stream, "__wrapped__", None)
    if not streams:
        return None
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:  # no running event loop: the first call looks again
        return None
    writer = StreamableHTTPTransport.post_writer.__code__
    for task in tasks:
        coro: Any = task.get_coro()
        for _ in range(_AWAIT_DEPTH):
            if coro is None:
                break
            if getattr(coro, "cr_code", None) is writer:
                frame = coro.cr_frame
                found = frame.f_locals if frame is not None else {}
                transport = found.get("self")
                if id(found.get("write_stream")) in streams and isinstance(transport, StreamableHTTPTransport):
                    return transport
                break
            coro = getattr(coro, "cr_await", None)
    return None


def guard_session(session: ClientSession) -> bool:
    """Guard the streamable HTTP transport of `session`; False when it has none (stdio, in memory) or it
    could not be found."""
    transport = transport_of(session)
    if transport is None:
        return False
    guard(transport)
    return True
