"""One call's path through the cache, as states and the transitions out of each: read this first.

Every transition is a typed decision with a readable reason, made by a pure function of
`mcpcache.client.policy` (whose rules are not repeated here) and dispatched exhaustively by the driver
(`ToolCache`, `mcpcache.client.cache`) with `match` and `assert_never`:

    named ──── fresh check without awaiting (ToolCache.fresh_hit) ─── fresh ──▶ served: fresh_hit
      │
      ▼
    Looked  (one metadata read: the entry, when freshness last ended; decide_lookup)
      ├── ServeFresh ─▶ served: fresh_hit          (or Unserved ─▶ looked again, or Fetch)
      ├── Revalidate ─┬─ stale window (decide_stale: ServeStale) ─▶ served: stale_while_revalidate,
      │               │                                              revalidated in the background
      ├── Fetch ──────┴─ single flight (decide_join: JoinFlight ─▶ a leader's answer | SendOwn)
      │                    ▼
      │                  Sent  (the request, with the tag when revalidating; decide_reply on the reply)
      │                    ├── ServeStored ───▶ served: revalidated   (or the stored copy gone ─▶ repeat)
      │                    ├── ApplyDelta ────▶ served: patched, kept (or unusable ─▶ repeat)
      │                    ├── RepeatWithoutTag ─▶ Sent again without a tag, once; then unanswerable
      │                    └── StoreAnswer | ReturnUnstored ─▶ kept (decide_size) ─▶ served: miss
      └── (the call fails) ─▶ decide_unanswered: EndFreshness | KeepFreshness; then stale-if-error
                              (decide_stale: ServeStale ─▶ served: stale_if_error | NotStale ─▶ raised)

This module holds the states the parts hand each other (`Looked`, `Unserved`, `Served`); the parts are
`mcpcache.client.lookup` (Looked), `mcpcache.client.stale` (the stale windows), `mcpcache.client.keeping`
(kept) and `mcpcache.client.managing` (the freshness ends every lookup reads).
"""

from __future__ import annotations

from enum import Enum

from mcp_types import CallToolResult, TextContent

from mcpcache.client.entries import Found
from mcpcache.client.outcomes import CallOutcome
from mcpcache.client.policy import Fetch, Revalidate, ServeFresh

__all__ = ["Looked", "Served", "Unserved", "unanswerable"]

Served = tuple[CallToolResult, CallOutcome]
"""An answer for the caller and what the cache did to produce it."""


class Unserved(Enum):
    """Why a stored answer chosen from its metadata was not served after all."""

    UNREADABLE = "the stored answer could not be read"
    """Its body does not decode: it goes."""
    GONE = "the stored answer changed or went while its body was loaded"
    """Another writer replaced or removed it (or the store dropped it as corrupt): look again."""
    STORE_FAILED = "the store did not hand over the stored answer"
    """The load failed or missed its deadline: a miss, and the entry stays."""


class Looked:
    """What one lookup found, when freshness last ended, and what the policy says to do."""

    __slots__ = ("decision", "ended_at", "found")

    def __init__(self, found: Found | None, ended_at: float | None, decision: ServeFresh | Revalidate | Fetch):
        self.found = found
        self.ended_at = ended_at
        self.decision = decision

    def unserved(self, why: Unserved) -> Looked:
        """The same lookup once the answer it chose could not be served: a miss, for `why`."""
        return Looked(None, self.ended_at, Fetch(store=True, reason=f"miss: {why.value}"))


def unanswerable(name: str, *, delta: bool = False) -> CallToolResult:
    """The error result of a call whose repeat without a tag was answered not-modified (or with a delta) again."""
    if delta:
        text = (
            f"The server answered a call of {name!r} that asked for the whole answer (no tag) with a delta reply "
            "it could not be patched from, so no answer is available; mcpcache never passes a delta reply off as "
            "a result."
        )
    else:
        text = (
            f"The server answered 'not modified' to a call of {name!r} that carried no tag (a repeat asking for "
            "the whole answer), so no answer is available; mcpcache never passes a not-modified reply off as a "
            "result."
        )
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
