"""Count the bytes an MCP conversation puts on the wire, message by message, at the client's transport.

On the core floor because two applications stand on it: `mcpcache bench` measures with it and `mcpcache
check` sizes each probe's request and reply with it (docs/architecture.md). The FastMCP client's
counting transport (`mcpcache.bench.wire`) is built on the same streams.

The claim mcpcache makes is about bytes ("a not-modified reply is a few hundred bytes"), so the
benchmarks measure bytes where they are spent, not the size of some Python object. The wrappers sit
between a transport and the client session, which is transport-independent: the same code counts
stdio, streamable HTTP and in-memory connections.

Each message is counted as the SDK's stdio transports frame it: its JSON (`model_dump_json(by_alias=True,
exclude_unset=True)`, UTF-8) plus one newline. For what the client sends this is the very serialisation
the transport writes. A message received has already been parsed, so it is serialised again; both ends
use the same pydantic serialiser on the same fields, so the length comes out the same. Over streamable
HTTP subtract one byte per message to get the body bytes (HTTP and SSE framing are not counted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self

from mcp.client import Transport
from mcp.client._transport import TransportStreams
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

__all__ = [
    "CountingTransport",
    "Direction",
    "WireLog",
    "WireRecord",
    "counting_streams",
    "message_bytes",
    "summarize",
]

Direction = Literal["sent", "received"]


def message_bytes(message: SessionMessage) -> int:
    """The bytes of one message as the stdio transports write it: UTF-8 JSON and a newline."""
    return len(message.message.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")) + 1


@dataclass(frozen=True)
class WireRecord:
    """One message seen at the transport."""

    direction: Direction
    kind: Literal["request", "notification", "response", "error"]
    method: str | None
    """The request's or notification's method; None for responses and errors."""
    request_id: str | int | None
    nbytes: int


def _record(direction: Direction, message: SessionMessage) -> WireRecord:
    inner = message.message
    nbytes = message_bytes(message)
    if isinstance(inner, JSONRPCRequest):
        return WireRecord(direction, "request", inner.method, inner.id, nbytes)
    if isinstance(inner, JSONRPCNotification):
        return WireRecord(direction, "notification", inner.method, None, nbytes)
    if isinstance(inner, JSONRPCResponse):
        return WireRecord(direction, "response", None, inner.id, nbytes)
    if isinstance(inner, JSONRPCError):
        return WireRecord(direction, "error", None, inner.id, nbytes)
    raise TypeError(f"not a JSON-RPC message: {type(inner).__name__}")


@dataclass
class WireLog:
    """Every message of one connection, in the order the client saw them.

    `deferred=True` keeps each message and measures it only when the log is read (`settle`), so a timed
    call does not also pay for serialising a multi-megabyte message a second time.
    """

    records: list[WireRecord] = field(default_factory=list)
    deferred: bool = False
    _pending: list[tuple[Direction, SessionMessage]] = field(default_factory=list, repr=False)

    def add(self, direction: Direction, message: SessionMessage) -> None:
        if self.deferred:
            self._pending.append((direction, message))
        else:
            self.records.append(_record(direction, message))

    def settle(self) -> None:
        """Measure the messages kept back by `deferred`, and let them go."""
        pending, self._pending = self._pending, []
        self.records.extend(_record(direction, message) for direction, message in pending)

    def mark(self) -> int:
        """A position to measure from: `log.since(log.mark())` after a call is that call's traffic."""
        self.settle()
        return len(self.records)

    def since(self, mark: int = 0) -> list[WireRecord]:
        self.settle()
        return self.records[mark:]

    def total(self, direction: Direction | None = None, *, since: int = 0) -> int:
        return sum(r.nbytes for r in self.since(since) if direction is None or r.direction == direction)

    def exchange(self, method: str, *, since: int = 0) -> tuple[WireRecord, WireRecord]:
        """The first `method` request after `since` and the response (or error) that answered it."""
        records = self.since(since)
        request = next((r for r in records if r.kind == "request" and r.method == method), None)
        if request is None:
            raise LookupError(f"no {method} request in the log")
        replies = (r for r in records if r.direction != request.direction and r.kind in ("response", "error"))
        reply = next((r for r in replies if r.request_id == request.request_id), None)
        if reply is None:
            raise LookupError(f"no reply to {method} request {request.request_id!r} in the log")
        return request, reply


class _CountingReadStream:
    """A read stream that records each message it hands on. Anything else is forwarded to the inner one."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], log: WireLog) -> None:
        self._inner = inner
        self._log = log

    def _seen(self, item: SessionMessage | Exception) -> SessionMessage | Exception:
        if isinstance(item, SessionMessage):
            self._log.add("received", item)
        return item

    async def receive(self) -> SessionMessage | Exception:
        return self._seen(await self._inner.receive())

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return self._seen(await self._inner.__anext__())

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)

    def __getattr__(self, name: str) -> Any:
        # The dispatcher reads optional attributes such as `last_context` off the stream it was given.
        return getattr(self._inner, name)


class _CountingWriteStream:
    """A write stream that records each message before handing it on."""

    def __init__(self, inner: WriteStream[SessionMessage], log: WireLog) -> None:
        self._inner = inner
        self._log = log
        self.__wrapped__ = inner
        """The stream handed on to (how `mcpcache.client.transport_guard` finds a session's transport)."""

    async def send(self, item: SessionMessage, /) -> None:
        self._log.add("sent", item)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def counting_streams(
    read_stream: ReadStream[SessionMessage | Exception], write_stream: WriteStream[SessionMessage], log: WireLog
) -> TransportStreams:
    """The two streams of a connection, each message recorded in `log` as it passes."""
    return _CountingReadStream(read_stream, log), _CountingWriteStream(write_stream, log)


class CountingTransport:
    """Wraps an `mcp.Client` transport: `Client(CountingTransport(stdio_client(params)))`.

    Any `mcp.client.Transport` works (stdio, streamable HTTP, in-memory). `mcp.Client(server)` given
    a server object directly has no streams to wrap; give it `InMemoryTransport(server)` instead.
    """

    def __init__(self, inner: Transport, log: WireLog | None = None) -> None:
        self.inner = inner
        self.log = log if log is not None else WireLog()

    async def __aenter__(self) -> TransportStreams:
        read_stream, write_stream = await self.inner.__aenter__()
        return counting_streams(read_stream, write_stream, self.log)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self.inner.__aexit__(exc_type, exc, tb)


def summarize(records: Sequence[WireRecord]) -> dict[Direction, int]:
    """Bytes per direction of `records`."""
    totals: dict[Direction, int] = {"sent": 0, "received": 0}
    for record in records:
        totals[record.direction] += record.nbytes
    return totals
