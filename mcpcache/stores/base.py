"""The one storage interface every mcpcache store implements, and the contract it keeps.

A store maps string keys to items: a small JSON metadata object kept apart from an opaque body, so a
revalidation can refresh the metadata of a 20 MB entry without rewriting the 20 MB (the idea
CacheControl's separate-body cache had). Items carry a group (used to drop or cap a whole conversation's
references at once), a creation time, an optional hard expiry, an optional tag (the body's version) and a
stamp (when the request behind the item was sent).

Contract, checked by tests/stores/test_contract.py against every store:
- `load` returns what `save` stored, or None. A missing, expired, corrupt or wrong-shape record is None,
  never an exception; a record that cannot be decoded is deleted.
- Every item carries a checksum of its body (`body_checksum`, xxh3_64), computed by the store on save
  (whatever `Item.checksum` a caller passes is ignored) and verified by the store on every load and
  `load_many`. A body that no longer matches its checksum is a corrupt record: the store logs one
  warning, deletes the record and answers None. The loaded `Item` carries the verified checksum.
- An item is expired once the store's clock reaches `expires_at` (`expires_at <= now`, the SDK's own
  freshness test). Expired items are never returned and never counted: `usage` and the counts the
  removal methods return cover live items only. A save whose `expires_at` has already passed stores
  nothing (and still drops the previous item under that key).
- `peek_many` answers as `load_many` would, each item without its body (`body=b""`) but with the checksum
  the store recorded for it, read in one atomic step (a consistent tag/checksum/meta triple). It does not
  read or verify the body: a caller that keeps its own decoded copy of a body trusts it only while the
  store's (key, tag, checksum) equal the ones it was decoded from.
- Every item has a `stamp`: when the request behind it was sent (0.0 unless given). `save` is refused
  (returns False, nothing changes, not even LRU order) when the live item under the key has a strictly
  later stamp: an answer to an older request never replaces a newer entry. An equal or later stamp
  replaces it. The comparison and the write are one atomic step in every store: one synchronous method in
  memory (atomic across the tasks of its event loop), one write transaction in SQLite and one Lua script
  in Redis (atomic across tasks and processes).
- Otherwise `save` replaces the whole item (its group, tag and labels too) and returns True if the item is now
  stored. A store bounded in bytes or items evicts least-recently-used items (loads, saves and
  `update_meta` all count as use) until the new item fits; an item larger than the whole byte bound is not
  stored (False), and the item it would have replaced is gone. The tag, stamp and labels are not
  counted in `Item.size`.
- `update_meta` replaces the metadata and expiry of an existing live item, keeping its body, group, tag,
  checksum and labels, and counts as a use; False if absent. Atomically with the change:
  - with `if_tag`, it changes the item only if the item's stored `tag` equals `if_tag` exactly (an item
    saved without a tag never matches); otherwise False and nothing changes (compare-and-set: a
    revalidation may only freshen the body whose tag it sent);
  - with `stamp`, it is refused (False, nothing changes) if the stored stamp is strictly later, and
    otherwise the item's stamp becomes `stamp`.
  If the new size no longer fits the byte bound, or the new expiry has passed, the item is dropped (it
  still returns True: the item existed and the update was admitted). A refused `save` or `update_meta`
  does not count as a use.
- Every item carries two labels a person can read and filter by, `server` and `tool` ("" when none: the
  tool cache's answers name the server and the tool they came from). They come back from every load, peek
  and listing, `save` replaces them with the rest of the item, and `update_meta` keeps them.
- Listing (`list_page`) walks the live items of one group, optionally of one server and one tool, in pages:
  each entry the item without its body (not read, not verified), its key and its size. It never counts as
  a use and never returns an expired item. A walk (from no cursor to a page whose cursor is None) returns
  every matching item that stays live throughout at least once, and exactly once while nothing is removed
  from the store during the walk (Redis's cursor may repeat an item when its index shrinks); an item saved
  or removed during the walk may or may not appear. A page holds at most `limit` entries (Redis: what one
  scan step of its index met, about `limit`, and all of a namespace of at most 128 items at once) and may
  hold fewer, even none, before the end. A record that cannot be decoded is skipped (the next load deletes
  it). `count` is what a walk would sum, and `remove_matching` removes what it would list, returning how
  many; both leave other groups, servers and tools alone.
- Group operations affect exactly the items saved with that group. `remove_created_before` drops items
  whose group starts with the prefix ("" matches every group) and whose `created_at` is strictly earlier.
  `trim_group` evicts in least-recently-used order and returns how many live items it evicted.
- `lost_before(keys)` says before when writes to these keys the store acknowledged may have been lost (a
  Redis failover or restart: replication and persistence are asynchronous), as of the store's last read of
  them; None for a store that loses no acknowledged write (memory, SQLite). A freshness mark is such a
  write, so the tool cache treats that moment as a freshness end.
- Operations may raise (a broken disk, a dead server, a non-finite stamp). Callers (the tool cache, the
  references) turn every store failure into a miss; stores do not swallow their own errors, and never
  raise for a corrupt record.

Every store also satisfies the MCP SDK's `ResponseCacheStore` protocol (get/set/delete/clear on
`CacheKey`/`CacheEntry`) through `SDKResponseCacheMixin` (`mcpcache.stores.sdk`), so one SQLite file or
Redis server can also hold `mcp.Client`'s own list and `resources/read` cache. What a store holds (`Item`
and the rest) is defined in `mcpcache.stores.items`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from mcpcache.stores.items import (
    DEFAULT_PAGE_SIZE,
    Item,
    Listed,
    Match,
    Page,
    Usage,
)
from mcpcache.stores.sdk import SDKResponseCacheMixin

__all__ = ["Store"]


class Store(SDKResponseCacheMixin, ABC):
    """The async interface of every mcpcache store. See the module docstring for the contract."""

    @abstractmethod
    async def load(self, key: str) -> Item | None: ...

    async def load_many(self, keys: Sequence[str]) -> list[Item | None]:
        """`load` of each key, in order. Stores override it where one round trip can serve them all."""
        return [await self.load(key) for key in keys]

    async def peek_many(self, keys: Sequence[str]) -> list[Item | None]:
        """What `load_many` would return, without the bodies: each item with `body=b""` and everything else
        (meta, group, times, tag, stamp, and the checksum recorded when the body was saved). The body is not
        read, so it is not verified; it counts as a use, as a load does. All keys in one atomic read where
        the store can (one synchronous step, one read transaction, one script). This default loads the
        bodies and drops them: correct for any store, cheap for none."""
        return [None if item is None else replace(item, body=b"") for item in await self.load_many(keys)]

    def peek_now(self, keys: Sequence[str]) -> list[Item | None] | None:
        """What `peek_many` would return, answered without awaiting by a store that can answer so without ever
        blocking (one held in this process's memory); None from any other store (the default), which is then
        asked through `peek_many`. It lets a caller skip the deadline it puts around every store operation
        (`mcpcache.stores.fence`) where no deadline can be missed."""
        return None

    def lost_before(self, keys: Sequence[str]) -> float | None:
        """The latest moment (by the store's clock, `now`) before which writes to `keys` that the store
        acknowledged may have been lost, as its last read of them found; None when none may have been (the
        default: a store that keeps what it acknowledged). See the module docstring."""
        return None

    @abstractmethod
    async def save(self, key: str, item: Item) -> bool:
        """Store `item` unless the live item under `key` has a strictly later stamp; True if now stored."""

    @abstractmethod
    async def update_meta(
        self,
        key: str,
        meta: Mapping[str, Any],
        expires_at: float | None,
        *,
        if_tag: str | None = None,
        stamp: float | None = None,
    ) -> bool:
        """Replace a live item's metadata and expiry (and stamp), if it exists, carries tag `if_tag` (when
        given) and has no later stamp than `stamp` (when given); True if the update was admitted."""

    @abstractmethod
    async def remove(self, key: str) -> None: ...

    @abstractmethod
    async def remove_group(self, group: str) -> int:
        """Drop every item of `group`; returns how many were dropped."""

    @abstractmethod
    async def remove_created_before(self, group_prefix: str, created_before: float) -> int:
        """Drop items whose group starts with `group_prefix` and that were created before the time."""

    @abstractmethod
    async def trim_group(self, group: str, max_bytes: int) -> int:
        """Evict the group's least-recently-used items until it holds at most `max_bytes`; returns the count."""

    @abstractmethod
    async def usage(self, group: str | None = None) -> Usage:
        """Items and bytes held, in one group or in the whole store."""

    @abstractmethod
    async def remove_all(self) -> None:
        """Drop everything this store holds (within its namespace)."""

    @abstractmethod
    async def list_page(self, match: Match, cursor: str | None = None, limit: int = DEFAULT_PAGE_SIZE) -> Page:
        """One page of the live items `match` covers, without their bodies (see the module docstring)."""

    async def entries(self, match: Match, *, page_size: int = DEFAULT_PAGE_SIZE) -> AsyncIterator[Listed]:
        """Every live item `match` covers, without its body, a page at a time: a store of any size is walked
        with one page in memory."""
        cursor: str | None = None
        while True:
            page = await self.list_page(match, cursor, page_size)
            for listed in page.entries:
                yield listed
            if page.cursor is None:
                return
            cursor = page.cursor

    async def count(self, match: Match) -> Usage:
        """Items and bytes `match` covers, as a walk would sum them. Stores override it where they can count
        without shipping every item's metadata."""
        items = held = 0
        async for listed in self.entries(match):
            items += 1
            held += listed.size
        return Usage(items=items, bytes=held)

    async def remove_matching(self, match: Match) -> int:
        """Remove every live item `match` covers; returns how many were removed. This default removes a page
        at a time what the walk lists; stores override it where one statement or script can do it."""
        removed = 0
        async for listed in self.entries(match):
            await self.remove(listed.key)
            removed += 1
        return removed

    async def prepare(self) -> None:
        """Connect ahead of the first operation, where that takes longer than an operation should (a Redis
        Cluster client learning the cluster): best effort, never raises. A server calls it before it listens,
        so its first callers do not pay for it (nor trip a deadline meant for one operation)."""

    def now(self) -> float:
        """The store's clock (epoch seconds): what expiry is judged against, and the default creation time."""
        return time.time()

    async def close(self) -> None:
        """Release connections; the store is unusable afterwards."""

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
