"""The gateway's SSE event store: what a caller whose stream broke mid-call gets back with `Last-Event-ID`.

Streamable HTTP (handshake era, 2025-11-25) lets a server number the events of each SSE stream, prime a
stream with an empty event and a `retry` interval, and replay, to a client that reconnects with
`Last-Event-ID`, the events of that stream after that one. The MCP SDK's transport does all of it once it
is given an `EventStore`; this is the gateway's, in memory and bounded:

- Events are kept by reference (the message objects the transport already holds), never copied or
  encoded again; what they hold is counted as the interpreter's size of their contents, walked only up to
  `max_event_bytes`.
- An event larger than `max_event_bytes` is not kept (a large answer would otherwise stay in memory after
  it was sent, for as long as the store keeps it). It leaves a gap mark in its stream: a caller resuming
  from before the gap is not replayed anything, because a replay that skipped the answer would lose it
  without saying so; a caller that received the large event resumes from it as from any other.
- Bounds per stream and in all, in bytes and in events, and an age: the oldest events go first.
- A `Last-Event-ID` this store does not keep (never issued, evicted, too old, or before a gap) replays
  nothing; the transport then ends the reconnected stream at once, as a server that keeps no events does
  (the spec lets a server replay; it must never replay events of another stream, or leave any out).

The transport asks for a store only in the handshake era's stateful sessions (2026-07-28 has no resumption)
and FastMCP scopes stream ids per session, so one caller can never be replayed another's events.
"""

from __future__ import annotations

import itertools
import secrets
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage

__all__ = [
    "DEFAULT_RETRY_MS",
    "BoundedEventStore",
    "ResumeBounds",
    "held_bytes",
    "resumable_streams",
]

DEFAULT_RETRY_MS = 1000
"""The SSE `retry` the gateway primes its streams with: how long a caller waits before it reconnects."""


@dataclass(frozen=True)
class ResumeBounds:
    """How much the event store keeps. The defaults keep every event of ordinary calls (progress, logs,
    answers of up to 1 MiB) for a few minutes, and no large answer."""

    max_event_bytes: int = 1 << 20
    max_stream_bytes: int = 4 << 20
    max_stream_events: int = 1000
    max_bytes: int = 32 << 20
    max_events: int = 20_000
    max_age_s: float = 300.0


def held_bytes(value: Any, limit: int) -> int:
    """What `value` (a JSON-RPC message, or the JSON-like data in it) holds in memory, by the interpreter's
    count of its objects, walked until the count passes `limit` (then some number above it): the cost is
    bounded by `limit`, not by the message."""
    total = 0
    pending = [value]
    while pending and total <= limit:
        item = pending.pop()
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
        elif hasattr(item, "__pydantic_fields__"):  # the message itself, or a model inside it
            pending.extend(vars(item).values())
    return total


@dataclass
class _Event:
    seq: int
    message: JSONRPCMessage | None
    """None: a priming event, or (with `gap`) an event too large to keep."""
    size: int
    at: float
    gap: bool = False


@dataclass
class _Stream:
    events: deque[_Event] = field(default_factory=deque)
    size: int = 0


class BoundedEventStore(EventStore):
    """An `EventStore` in memory within `ResumeBounds` (see the module docstring)."""

    def __init__(self, bounds: ResumeBounds | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.bounds = bounds or ResumeBounds()
        self._clock = clock
        self._prefix = secrets.token_hex(4)  # an id from another process is never taken for one of ours
        self._seqs = itertools.count(1)
        self._streams: dict[StreamId, _Stream] = {}
        self._where: dict[int, StreamId] = {}
        """Every kept event (gap marks included): its sequence number -> its stream."""
        self._order: deque[tuple[int, StreamId]] = deque()
        """Kept events, oldest first; entries of events already dropped from their stream are skipped."""
        self._size = 0

    @property
    def kept_events(self) -> int:
        return len(self._where)

    @property
    def kept_bytes(self) -> int:
        return self._size

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        seq = next(self._seqs)
        now = self._clock()
        limit = self.bounds.max_event_bytes
        size = 0 if message is None else held_bytes(message, limit)
        event = _Event(seq, message, size, now) if size <= limit else _Event(seq, None, 0, now, gap=True)
        stream = self._streams.setdefault(stream_id, _Stream())
        stream.events.append(event)
        stream.size += event.size
        self._size += event.size
        self._where[seq] = stream_id
        self._order.append((seq, stream_id))
        self._trim_stream(stream_id, stream)
        self._trim_all(now)
        if len(self._order) > 2 * len(self._where) + 64:
            # Entries of events their stream's bounds dropped wait behind older ones: cleared in one pass,
            # so the order never holds more than twice what is kept.
            self._order = deque(entry for entry in self._order if entry[0] in self._where)
        return self._event_id(seq)

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        self._trim_all(self._clock())
        seq = self._seq_of(last_event_id)
        stream_id = self._where.get(seq) if seq is not None else None
        if seq is None or stream_id is None:
            return None
        after = [event for event in self._streams[stream_id].events if event.seq > seq]
        if any(event.gap for event in after):
            return None  # the replay would leave out an event the caller never received
        for event in after:
            if event.message is not None:  # priming events are not replayed
                await send_callback(EventMessage(event.message, self._event_id(event.seq)))
        return stream_id

    def _event_id(self, seq: int) -> EventId:
        return f"{self._prefix}-{seq}"

    def _seq_of(self, event_id: EventId) -> int | None:
        prefix, _, number = event_id.partition("-")
        if prefix != self._prefix or not number.isdigit():
            return None
        return int(number)

    def _drop_oldest(self, stream_id: StreamId, stream: _Stream) -> None:
        event = stream.events.popleft()
        stream.size -= event.size
        self._size -= event.size
        del self._where[event.seq]
        if not stream.events:
            del self._streams[stream_id]

    def _trim_stream(self, stream_id: StreamId, stream: _Stream) -> None:
        bounds = self.bounds
        while stream.events and (
            len(stream.events) > bounds.max_stream_events or stream.size > bounds.max_stream_bytes
        ):
            self._drop_oldest(stream_id, stream)

    def _trim_all(self, now: float) -> None:
        bounds = self.bounds
        oldest_kept = now - bounds.max_age_s
        while self._order:
            seq, stream_id = self._order[0]
            if seq not in self._where:  # already dropped by its stream's bounds
                self._order.popleft()
                continue
            stream = self._streams[stream_id]
            first = stream.events[0]
            over = len(self._where) > bounds.max_events or self._size > bounds.max_bytes
            if not over and first.at >= oldest_kept:
                break
            # The globally oldest kept event is the oldest of its stream: streams only ever lose their oldest.
            assert first.seq == seq
            self._drop_oldest(stream_id, stream)
            self._order.popleft()


def resumable_streams(*, json_response: bool, bounds: ResumeBounds | None = None) -> dict[str, Any]:
    """FastMCP `http_app`/`run_http_async` options that make the gateway's SSE streams resumable: an event
    store and the `retry` its streams are primed with. None when every answer is one JSON body (no stream
    to resume; the transport would store every message all the same)."""
    if json_response:
        return {}
    return {"event_store": BoundedEventStore(bounds), "retry_interval": DEFAULT_RETRY_MS}
