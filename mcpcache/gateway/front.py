"""The replica's front tier: fresh answers it just served from the shared store, served again without asking
the store for at most `RECHECK_S`.

A fresh hit through a partition's `ToolCache` costs one round trip to Redis for the entry's metadata (is it
still there, still fresh, has anyone ended its freshness), about as much CPU as the rest of the gateway's
work on the hit together. Within an answer's freshness nothing the gateway itself does can change what
that look says: no replica writes a fresh entry over another's, and the gateway never ends freshness
(docs/gateway.md, "Limits"). What it would see is someone else's work on the store: `mcpcache cache clear`,
or the store losing the entry. So the front tier keeps each fresh hit for the rest of its freshness, but
serves it only within `RECHECK_S` of the look that confirmed it; after that the next call looks again,
and a cleared or lost entry stops being served within `RECHECK_S` on every replica. A run of hits on one
answer then asks the store once a second, not once a call.

The answers are held as the partition's cache handed them out (its private copy) and handed to FastMCP
as they are: the gateway only wraps them (`_as_tool_result`, a new `_meta` for the block) and FastMCP
serialises them. A Prefab payload, whose tool references FastMCP rewrites in place after every middleware,
is never held. `decide_front` decides, on an injected clock's readings; `FrontTier` keeps the entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mcp_types as mt
from cachetools import LRUCache

from mcpcache.canonical import CanonicalizationError, canonical_json
from mcpcache.client.outcomes import CallOutcome
from mcpcache.protocol import CacheBlock
from mcpcache.server.fastmcp.answers import readdressed_above_middleware

__all__ = ["RECHECK_S", "AskStore", "FrontEntry", "FrontHit", "FrontTier", "decide_front", "front_key"]

RECHECK_S = 1.0
"""How long a fresh hit is served again without asking the store: the longest a replica keeps serving an
entry that `mcpcache cache clear` removed (or the store lost) within its freshness."""

FrontKey = tuple[str, str, str, str, bytes]


def front_key(partition: str, server_id: str, era: str, tool: str, arguments: Any) -> FrontKey | None:
    """The key of one call in the front tier; None when its arguments have no canonical form (never held)."""
    try:
        return partition, server_id, era, tool, canonical_json(dict(arguments or {}))
    except (CanonicalizationError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class FrontEntry:
    """A fresh hit of a partition's cache: the answer as served, until when it is fresh, and until when it
    may be served without asking the store again (both on the front tier's clock)."""

    result: mt.CallToolResult
    fresh_until: float
    checked_until: float
    size: int
    reason: str
    block: CacheBlock | None = None
    """The answer's cache block, read once when it is held (`reply_block`)."""


@dataclass(frozen=True)
class FrontHit:
    """Serve the held answer, fresh for `fresh_for_ms` more."""

    result: mt.CallToolResult
    fresh_for_ms: int
    reason: str
    block: CacheBlock | None = None


@dataclass(frozen=True)
class AskStore:
    """Go through the partition's cache (and the store)."""

    reason: str


FrontDecision = FrontHit | AskStore


def decide_front(entry: FrontEntry | None, now: float) -> FrontDecision:
    if entry is None:
        return AskStore("not held in this replica")
    if now >= entry.fresh_until:
        return AskStore("held, no longer fresh")
    if now >= entry.checked_until:
        return AskStore(f"held, not checked against the store for {RECHECK_S:g} s")
    return FrontHit(entry.result, int((entry.fresh_until - now) * 1000), entry.reason, entry.block)


class FrontTier:
    """Fresh hits by `front_key`, the least recently used dropped first, within `budget_bytes` (the stored
    size of each answer; an answer larger than a sixteenth of the budget is never held)."""

    def __init__(self, budget_bytes: int, *, recheck_s: float = RECHECK_S) -> None:
        self.budget_bytes = budget_bytes
        self.recheck_s = recheck_s
        self._entries: LRUCache[FrontKey, FrontEntry] = LRUCache(maxsize=max(1, budget_bytes), getsizeof=_size)

    def get(self, key: FrontKey, now: float) -> FrontDecision:
        decision = decide_front(self._entries.get(key), now)
        if isinstance(decision, AskStore) and key in self._entries:
            del self._entries[key]
        return decision

    def record(
        self,
        key: FrontKey,
        result: mt.CallToolResult,
        outcome: CallOutcome,
        now: float,
        block: CacheBlock | None = None,
    ) -> None:
        """What the partition's cache did for the call: a fresh hit is held (with its cache `block` as read),
        anything else drops the entry."""
        self._entries.pop(key, None)
        size = outcome.bytes_saved
        if (
            outcome.status != "fresh_hit"
            or outcome.fresh_for_ms is None
            or result.is_error
            or size <= 0
            or size > self.budget_bytes // 16
            or readdressed_above_middleware(result.structured_content)
        ):
            return
        fresh_until = now + outcome.fresh_for_ms / 1000
        entry = FrontEntry(result, fresh_until, min(fresh_until, now + self.recheck_s), size, outcome.reason, block)
        self._entries[key] = entry

    def __len__(self) -> int:
        return len(self._entries)


def _size(entry: FrontEntry) -> int:
    return entry.size
