"""Single flight: concurrent identical calls share one request.

The leader sends; followers wait for its answer and each get a private copy. Two limits keep sharing
from changing what a caller is served (docs/protocol.md section 5):
- who may join is the policy's decision (`mcpcache.client.policy.decide_join`): never a request sent before the
  partition's freshness last ended;
- each caller keeps its own timeout and cancellation. A follower waits no longer than its own timeout
  and then fails as the SDK fails a timed-out request; a leader that fails for reasons of its own (its
  timeout, its cancellation, its connection lost) does not fail its followers: they elect a new leader
  among themselves.
  Anything else the leader's request raised (an error answer from the server, a closed connection) is
  what the followers' identical request would have met, and they get it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
import mcp_types as mt
from cachetools import LRUCache
from mcp.shared.exceptions import MCPError

from mcpcache.client.entries import encode_result
from mcpcache.client.outcomes import CallOutcome
from mcpcache.client.tier import copy_result

_TIMED_OUT = "Request 'tools/call' timed out"


def timeout_error() -> MCPError:
    """What the SDK raises for a request whose read timeout elapsed."""
    return MCPError(code=mt.REQUEST_TIMEOUT, message=_TIMED_OUT)


_CONNECTION_FAILURES = (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream)


def failure_is_the_leaders_own(exc: BaseException) -> bool:
    """Whether a leader's failure belongs to its caller or its connection, not to the request its followers
    share: its timeout, its cancellation, or its connection lost (a follower may be waiting from another
    session of the same cache, whose connection is fine). An error the server answered is shared."""
    if isinstance(exc, MCPError):
        return exc.code in (mt.REQUEST_TIMEOUT, mt.CONNECTION_CLOSED)
    return isinstance(exc, (TimeoutError, anyio.get_cancelled_exc_class(), *_CONNECTION_FAILURES))


@dataclass
class Flight:
    sent_at: float
    """The cache's clock when the leader decided to send: what `decide_join` compares."""
    done: anyio.Event = field(default_factory=anyio.Event)
    result: mt.CallToolResult | None = None
    outcome: CallOutcome | None = None
    error: BaseException | None = None
    size: int | None = None
    """The answer's bytes as sent, when the leader knows them (it kept the answer in the decoded tier)."""
    waiting: int = 0
    """Followers waiting for this flight."""
    shared: mt.CallToolResult | None = None
    """A private copy of the leader's answer taken as it landed, before the leader's caller could change
    it, and only when someone waits for it (a call nobody waited for pays nothing for sharing). Each
    follower is served a copy of this copy (`copy_result`: no encoding, no decoding)."""

    def snapshot(self) -> None:
        """Called as the flight lands, before the leader's caller gets its answer."""
        if self.waiting and self.result is not None and self.shared is None:
            self.shared = copy_result(self.result)

    def copy_for_follower(self) -> tuple[mt.CallToolResult, CallOutcome] | None:
        """A private copy of the leader's answer, and this follower's outcome (it sent nothing)."""
        if self.shared is None or self.outcome is None:
            return None
        copy = copy_result(self.shared)
        leader = self.outcome
        if self.size is None:
            self.size = len(encode_result(self.shared))  # once per flight, and only for an answer not kept
        saved = self.size if leader.status in ("miss", "bypass") else leader.bytes_saved
        reason = f"shared an identical call in flight: {leader.reason}"
        return copy, CallOutcome(leader.status, False, reason, saved, coalesced=True)


class Flights:
    """The calls in flight in one cache, by store key."""

    def __init__(self) -> None:
        self._by_key: dict[str, Flight] = {}
        self._landed: LRUCache[str, int] = LRUCache(maxsize=4096)
        """How many flights have landed per key: a lookup that began before one landed looks again."""

    def current(self, key: str) -> Flight | None:
        return self._by_key.get(key)

    def landed(self, key: str) -> int:
        return self._landed.get(key, 0)

    def start(self, key: str, sent_at: float) -> Flight:
        # A newer flight replaces an older one that callers may no longer join; the older still lands.
        flight = Flight(sent_at)
        self._by_key[key] = flight
        return flight

    def land(self, key: str, flight: Flight) -> None:
        """The leader is done (answered, failed or cancelled); wake its followers. Never raises."""
        if self._by_key.get(key) is flight:
            del self._by_key[key]
        self._landed[key] = self._landed.get(key, 0) + 1
        flight.snapshot()
        flight.done.set()

    @staticmethod
    async def follow(flight: Flight, deadline: float | None) -> tuple[mt.CallToolResult, CallOutcome] | None:
        """Wait for the leader until `deadline` (anyio's clock; None: no bound of this caller's own).

        The leader's answer as a private copy; None when the caller should go on its own (the leader failed
        for reasons of its own or its answer could not be copied). Raises the leader's error when the
        follower's identical request would have met it, and the SDK's timeout error at the deadline.
        """
        flight.waiting += 1
        if deadline is None:
            await flight.done.wait()
        else:
            with anyio.move_on_after(max(deadline - anyio.current_time(), 0.0)):
                await flight.done.wait()
            if not flight.done.is_set():
                raise timeout_error()
        shared = flight.copy_for_follower()
        if shared is not None:
            return shared
        if flight.error is not None and not failure_is_the_leaders_own(flight.error):
            raise flight.error
        return None
