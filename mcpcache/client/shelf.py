"""What every part of one `ToolCache` reads and writes: `Shelf`.

The driver (`mcpcache.client.cache`) owns its parts as objects (the lookup, keeping, stale serving,
managing); each part is handed the shelf, and any other part it uses, when the driver builds it. Nothing
here decides anything: it is where one cache's shared state lives, in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cachetools import LRUCache

from mcpcache.client.background import Deferred
from mcpcache.client.leaves import LeafMemo
from mcpcache.client.outcomes import CacheStats
from mcpcache.client.settings import CacheSettings
from mcpcache.client.tier import DecodedTier
from mcpcache.stores.base import Store
from mcpcache.stores.fence import FencedStore

__all__ = ["Clock", "Shelf"]

Clock = Callable[[], float]


@dataclass(frozen=True, eq=False, slots=True)
class Shelf:
    """One cache's shared state (the objects are shared and change; which objects they are does not)."""

    settings: CacheSettings
    partition: str
    """The authorization context the answers belong to."""
    clock: Clock
    store: Store
    """The store as given: for what is not fenced (its clock, its losses, a clear, a listing)."""
    fenced: FencedStore
    """The same store behind its deadline and cooldown: what calls use."""
    tier: DecodedTier
    """Stored answers held decoded in front of the store."""
    deferred: Deferred
    """Store writes started beside the calls that asked for them (see `mcpcache.client.background`)."""
    leaves: LeafMemo
    """The tree digests' leaf hashes of stored answers (`mcpcache.client.leaves`)."""
    validated: LRUCache[tuple[str, str, str], None]
    """Stored answers this process has already checked against the client's output schemas, by (key, tag,
    body checksum): a revalidated answer is checked the first time it is served here, not every time, and
    another body stored under the same key and tag is checked again."""
    stats: CacheStats
