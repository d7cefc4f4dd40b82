"""TCP relays on 127.0.0.1: one that counts the bytes passing each way between an HTTP client and server,
and one that carries them over a simulated link (`link_relay`: a bandwidth and a one-way latency, for
`mcpcache bench --link`).

`mcpcache.wire_count` counts messages at a client's transport, inside the process; a process that cannot
be instrumented (`mcpcache proxy` talking to its upstream) is measured here instead, on the wire: point
its `--url` at the relay and read the relay's `Traffic` before and after a call. Nothing is changed.
Two counts are kept per direction:
- `sent` / `received`: every byte on the TCP connections, HTTP headers and framing included;
- `sent_messages` / `received_messages`: the bytes of the JSON-RPC messages inside (request bodies, and
  response bodies or the `data:` lines of an event stream), parsed from the same bytes with h11: the
  count `mcpcache.wire_count` makes, less its one newline per message.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

import anyio
import h11
from anyio.abc import ByteReceiveStream, ByteSendStream, SocketAttribute, SocketStream

Direction = Literal["sent", "received"]


@dataclass
class Traffic:
    sent: int = 0
    """TCP bytes from the proxy to the upstream."""
    received: int = 0
    """TCP bytes from the upstream to the proxy."""
    sent_messages: int = 0
    received_messages: int = 0
    connections: int = 0

    def total(self) -> int:
        return self.sent + self.received

    def messages(self) -> int:
        return self.sent_messages + self.received_messages

    def snapshot(self) -> Traffic:
        return Traffic(self.sent, self.received, self.sent_messages, self.received_messages, self.connections)

    def since(self, earlier: Traffic) -> Traffic:
        return Traffic(
            self.sent - earlier.sent,
            self.received - earlier.received,
            self.sent_messages - earlier.sent_messages,
            self.received_messages - earlier.received_messages,
            self.connections - earlier.connections,
        )


class _Bodies:
    """The message bytes in one direction of one HTTP/1.1 connection, parsed as they arrive.

    A fresh h11 connection parses each message (fed what the last one left over), so requests and
    responses are parsed independently, without pairing them. A response body that is an event stream
    counts the payload of its `data:` lines; any other body counts whole.
    """

    def __init__(self, direction: Direction) -> None:
        self._direction = direction
        self._pending = b""
        self._parser = self._fresh()
        self._stream = False
        self._lines: list[bytes] = []

    def _fresh(self) -> h11.Connection:
        if self._direction == "sent":
            return h11.Connection(h11.SERVER)
        parser = h11.Connection(h11.CLIENT)
        # A client-side parser reads a response only after a request; the method only decides framing.
        parser.send(h11.Request(method="POST", target="/", headers=[("Host", "upstream")]))
        parser.send(h11.EndOfMessage())
        return parser

    def feed(self, data: bytes) -> int:
        counted = 0
        self._parser.receive_data(data)
        while True:
            event = self._parser.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return counted
            if isinstance(event, h11.Response | h11.Request):
                kind = dict(event.headers).get(b"content-type", b"")
                self._stream = kind.startswith(b"text/event-stream")
            elif isinstance(event, h11.Data):
                counted += self._body(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                leftover, _ = self._parser.trailing_data
                self._parser = self._fresh()
                self._stream, self._lines = False, []
                if leftover:  # h11 reads empty data as the peer closing
                    self._parser.receive_data(leftover)
            elif isinstance(event, h11.ConnectionClosed):
                return counted

    def _body(self, chunk: bytes) -> int:
        if not self._stream:
            return len(chunk)
        # A 10 MB event arrives as one line in 64 KB chunks: its pieces are joined once, when the line
        # ends, not re-joined and re-split with every chunk.
        *complete, last = chunk.split(b"\n")
        if not complete:
            self._lines.append(last)
            return 0
        complete[0] = b"".join([*self._lines, complete[0]])
        self._lines = [last]
        return sum(len(line[5:].strip()) for line in complete if line.startswith(b"data:"))


async def _pump(source: ByteReceiveStream, sink: ByteSendStream, traffic: Traffic, direction: Direction) -> None:
    bodies = _Bodies(direction)
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        while True:
            chunk = await source.receive(65536)
            messages = bodies.feed(chunk)
            if direction == "sent":
                traffic.sent += len(chunk)
                traffic.sent_messages += messages
            else:
                traffic.received += len(chunk)
                traffic.received_messages += messages
            await sink.send(chunk)


@contextlib.asynccontextmanager
async def counting_relay(target_port: int) -> AsyncIterator[tuple[int, Traffic]]:
    """Yields (the relay's port, its running counts); stops relaying on exit."""
    traffic = Traffic()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")

    async def handle(client: SocketStream) -> None:
        traffic.connections += 1
        async with (
            client,
            await anyio.connect_tcp("127.0.0.1", target_port) as upstream,
            anyio.create_task_group() as pumps,
        ):

            async def both(source: SocketStream, sink: SocketStream, direction: Direction) -> None:
                await _pump(source, sink, traffic, direction)
                pumps.cancel_scope.cancel()  # one side closed: the connection is over

            pumps.start_soon(both, client, upstream, "sent")
            pumps.start_soon(both, upstream, client, "received")

    async with anyio.create_task_group() as group:
        group.start_soon(listener.serve, handle)
        try:
            yield listener.extra(SocketAttribute.local_port), traffic
        finally:
            group.cancel_scope.cancel()


# A simulated link --------------------------------------------------------------------------------

_UNITS = {"kbit": 1_000, "mbit": 1_000_000, "gbit": 1_000_000_000}

DEFAULT_LATENCY_MS = 20.0
"""The one-way latency `mcpcache bench --link` adds unless told otherwise (a link within a continent)."""


@dataclass(frozen=True)
class Link:
    """A simulated network link: `rate` bits per second each way, `latency_ms` one way."""

    name: str
    rate: int
    latency_ms: float = DEFAULT_LATENCY_MS

    @property
    def label(self) -> str:
        """How tables and plots name it, saying it is simulated."""
        return f"simulated {self.name} link, {self.latency_ms:g} ms one way"


def parse_link(text: str, latency_ms: float = DEFAULT_LATENCY_MS) -> Link:
    """'100mbit' -> a 100 Mbit/s link (kbit, mbit, gbit; decimal units, as network rates are named)."""
    spoken = text.strip().lower().replace(" ", "").removesuffix("/s").removesuffix("ps")
    for unit, factor in _UNITS.items():
        if spoken.endswith(unit):
            try:
                number = float(spoken[: -len(unit)])
            except ValueError:
                break
            if number > 0 and latency_ms >= 0:
                return Link(f"{number:g} {unit[0].upper()}{unit[1:]}/s", int(number * factor), latency_ms)
            break
    raise ValueError(f"cannot read {text!r} as a link rate (e.g. 100mbit, 10mbit, 1gbit)")


async def _paced(source: ByteReceiveStream, sink: ByteSendStream, link: Link) -> None:
    """Relay one direction as a link would carry it: each chunk leaves when the link has sent the bytes
    before it (`rate`), and arrives `latency_ms` later; chunks stay in order and none is held back by a
    later one. The sender is never slowed (the link's queue is unbounded): what is measured is when the
    bytes arrive."""
    send, receive = anyio.create_memory_object_stream[tuple[float, bytes]](max_buffer_size=1 << 20)
    latency = link.latency_ms / 1000
    per_byte = 8 / link.rate

    async def read() -> None:
        sent_until = 0.0
        async with send:
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                while True:
                    chunk = await source.receive(65536)
                    now = anyio.current_time()
                    sent_until = max(now, sent_until) + len(chunk) * per_byte
                    await send.send((sent_until + latency, chunk))

    async def write() -> None:
        async with receive:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                async for due, chunk in receive:
                    wait = due - anyio.current_time()
                    if wait > 0:
                        await anyio.sleep(wait)
                    await sink.send(chunk)
        if isinstance(sink, SocketStream):
            with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await sink.send_eof()

    async with anyio.create_task_group() as group:
        group.start_soon(read)
        group.start_soon(write)


@contextlib.asynccontextmanager
async def link_relay(target_port: int, link: Link, port: int = 0) -> AsyncIterator[int]:
    """A relay on 127.0.0.1 that carries every connection to `target_port` over a simulated `link`; yields
    its port."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)

    async def handle(client: SocketStream) -> None:
        try:
            upstream = await anyio.connect_tcp("127.0.0.1", target_port)
        except OSError:
            await client.aclose()  # the upstream is not there (yet): this connection fails, not the relay
            return
        async with client, upstream, anyio.create_task_group() as pumps:

            async def both(source: SocketStream, sink: SocketStream) -> None:
                await _paced(source, sink, link)
                pumps.cancel_scope.cancel()

            pumps.start_soon(both, client, upstream)
            pumps.start_soon(both, upstream, client)

    async with anyio.create_task_group() as group:
        group.start_soon(listener.serve, handle)
        try:
            yield listener.extra(SocketAttribute.local_port)
        finally:
            group.cancel_scope.cancel()


def run_link_relay(port: int, target_port: int, link: Link, log_path: str) -> None:
    """A relay process's whole life (what `mcpcache bench --link` starts beside each HTTP server)."""
    import os

    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)

    async def serve() -> None:
        from mcpcache.processes import accepts

        # Listening only once the upstream does: a client that finds the relay finds its server.
        for _ in range(2400):  # two minutes at most; past that, connections fail as they would without it
            if accepts(target_port):
                break
            await anyio.sleep(0.05)
        async with link_relay(target_port, link, port):
            await anyio.sleep_forever()

    anyio.run(serve)
