"""The in-process store: a byte-bounded LRU for one process that needs no file and no server.

Unbounded in-memory caches are the second most reported problem with Python HTTP caches (a few large
bodies and the process is gone), so this store is bounded by default and counts exactly what the contract
counts: body bytes plus encoded metadata. Bodies are held as immutable `bytes` and nothing but the LRU
table refers to them, so an evicted body is freed the moment it leaves (unless a caller still holds the
`Item` it loaded).

Every method body is synchronous (no await between reading a record and replacing it), so on one event
loop no task ever sees a half-done operation, and the stamp and tag comparisons of `save` and
`update_meta` are atomic with the write they guard. The store is not meant to be shared across threads or
event loops.

Bodies are checksummed on save and verified on load like every store's: nothing in this process should
alter an immutable `bytes`, so a mismatch here means memory was corrupted underneath Python (or a test
reached into the internals), and the record is dropped all the same.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cachetools import Cache, LRUCache

from mcpcache.stores.base import Store
from mcpcache.stores.items import (
    DEFAULT_PAGE_SIZE,
    Item,
    Listed,
    Match,
    Page,
    StoreLimits,
    Usage,
    body_checksum,
    check_stamp,
    cursor_position,
    decode_meta,
    encode_meta,
    position_cursor,
)

logger = logging.getLogger("mcpcache.stores.memory")

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""The bound when no limits are given: a cache must never be the reason a process runs out of memory."""


@dataclass(frozen=True, slots=True)
class _Record:
    meta: bytes
    """Encoded once at save: the byte count is exact and a caller mutating its dict cannot reach in."""
    body: bytes
    group: str
    created_at: float
    expires_at: float | None
    tag: str | None
    stamp: float
    checksum: str
    server: str
    tool: str
    seq: int
    """Tells a live record from a stale entry of the expiry heap."""
    peeked: Item | None = None
    """What `peek_now` answers for this record, made on its first peek: the one field set after construction
    (by `object.__setattr__`), since a record is replaced, never changed, whenever what it holds changes."""

    @property
    def size(self) -> int:
        return len(self.meta) + len(self.body)

    def item(self, meta: dict[str, Any], *, with_body: bool) -> Item:
        body = self.body if with_body else b""
        return Item(
            meta, body, self.group, self.created_at, self.expires_at, self.tag, self.stamp, self.checksum,
            self.server, self.tool,
        )  # fmt: skip


class _GroupIndex:
    __slots__ = ("bytes", "order")

    def __init__(self) -> None:
        self.order: OrderedDict[str, None] = OrderedDict()
        """The group's keys, least recently used first."""
        self.bytes = 0


class _NotifyingLRU(LRUCache[str, _Record]):
    """An LRUCache that reports what it evicts, so the group index never names a dropped key."""

    def __init__(self, maxsize: float, on_evict: Callable[[str, _Record], None]) -> None:
        super().__init__(maxsize, getsizeof=_record_size)
        self._on_evict = on_evict

    def popitem(self) -> tuple[str, _Record]:
        key, record = super().popitem()
        self._on_evict(key, record)
        return key, record


def _record_size(record: _Record) -> int:
    return record.size


class MemoryStore(Store):
    """A store in this process's memory, bounded in bytes (64 MiB unless `limits` says otherwise)."""

    def __init__(self, limits: StoreLimits | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self.limits = limits if limits is not None else StoreLimits(max_bytes=DEFAULT_MAX_BYTES)
        self._clock = clock
        max_bytes = self.limits.max_bytes
        self._items = _NotifyingLRU(math.inf if max_bytes is None else max_bytes, self._unindex)
        self._groups: dict[str, _GroupIndex] = {}
        self._expiry: list[tuple[float, int, str]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._clock()

    async def load(self, key: str) -> Item | None:
        self._purge_expired()
        return self._load(key)

    async def load_many(self, keys: Sequence[str]) -> list[Item | None]:
        self._purge_expired()
        return [self._load(key) for key in keys]

    async def peek_many(self, keys: Sequence[str]) -> list[Item | None]:
        self._purge_expired()
        return [self._load(key, with_body=False) for key in keys]

    def peek_now(self, keys: Sequence[str]) -> list[Item | None] | None:
        """As the base class says; the items (and their metadata) are shared between calls for the same record,
        so a caller reads them and never changes them, as `Item.meta`'s type says."""
        if type(self).peek_many is not MemoryStore.peek_many:
            return None  # a subclass that peeks its own way (counting, failing, waiting) is asked its way
        self._purge_expired()
        return [self._peeked(key) for key in keys]

    def _peeked(self, key: str) -> Item | None:
        """`_load(key, with_body=False)`, its metadata decoded once per record: a fresh hit peeks every call."""
        if key not in self._items:
            return None
        record = self._items[key]  # counted as a use, as `_load` does
        peeked = record.peeked
        if peeked is None:
            peeked = self._load(key, with_body=False)
            if peeked is not None:
                object.__setattr__(record, "peeked", peeked)
            return peeked
        self._groups[record.group].order.move_to_end(key)
        return peeked

    def _load(self, key: str, *, with_body: bool = True) -> Item | None:
        if key not in self._items:
            return None
        record = self._items[key]  # indexing, unlike a peek, moves the key to the LRU's recent end
        self._groups[record.group].order.move_to_end(key)
        meta = decode_meta(record.meta)
        if meta is None:  # cannot happen for records this store encoded; kept to honour the contract
            logger.warning("dropping a corrupt record under key %r: metadata is not a JSON object", key)
            self._delete(key)
            return None
        if with_body and body_checksum(record.body) != record.checksum:
            logger.warning("dropping a corrupt record under key %r: the body does not match its checksum", key)
            self._delete(key)
            return None
        return record.item(meta, with_body=with_body)

    async def save(self, key: str, item: Item) -> bool:
        stamp = check_stamp(item.stamp)
        body = item.body if type(item.body) is bytes else bytes(item.body)
        meta = encode_meta(item.meta)
        checksum = body_checksum(body)
        # From here to the end nothing awaits: the stamp comparison and the write are one step.
        self._purge_expired()
        old = self._peek(key)
        if old is not None and old.stamp > stamp:
            return False
        self._delete(key)
        record = _Record(
            meta,
            body,
            item.group,
            item.created_at,
            item.expires_at,
            item.tag,
            stamp,
            checksum,
            item.server,
            item.tool,
            next(self._seq),
        )
        return self._insert(key, record)

    async def update_meta(
        self,
        key: str,
        meta: Mapping[str, Any],
        expires_at: float | None,
        *,
        if_tag: str | None = None,
        stamp: float | None = None,
    ) -> bool:
        new_stamp = None if stamp is None else check_stamp(stamp)
        encoded = encode_meta(meta)
        self._purge_expired()
        old = self._peek(key)
        if old is None:
            return False
        if if_tag is not None and old.tag != if_tag:
            return False
        if new_stamp is not None and old.stamp > new_stamp:
            return False
        self._delete(key)
        record = _Record(
            encoded,
            old.body,
            old.group,
            old.created_at,
            expires_at,
            old.tag,
            old.stamp if new_stamp is None else new_stamp,
            old.checksum,
            old.server,
            old.tool,
            next(self._seq),
        )
        self._insert(key, record)
        return True

    async def remove(self, key: str) -> None:
        self._purge_expired()
        self._delete(key)

    async def remove_group(self, group: str) -> int:
        self._purge_expired()
        index = self._groups.get(group)
        if index is None:
            return 0
        keys = list(index.order)
        for key in keys:
            self._delete(key)
        return len(keys)

    async def remove_created_before(self, group_prefix: str, created_before: float) -> int:
        self._purge_expired()
        doomed = [
            key
            for group, index in self._groups.items()
            if group.startswith(group_prefix)
            for key in index.order
            if self._created_at(key) < created_before
        ]
        for key in doomed:
            self._delete(key)
        return len(doomed)

    async def trim_group(self, group: str, max_bytes: int) -> int:
        self._purge_expired()
        evicted = 0
        while (index := self._groups.get(group)) is not None and index.bytes > max_bytes:
            self._delete(next(iter(index.order)))
            evicted += 1
        return evicted

    async def usage(self, group: str | None = None) -> Usage:
        self._purge_expired()
        if group is None:
            return Usage(items=len(self._items), bytes=int(self._items.currsize))
        index = self._groups.get(group)
        return Usage(0, 0) if index is None else Usage(items=len(index.order), bytes=index.bytes)

    async def list_page(self, match: Match, cursor: str | None = None, limit: int = DEFAULT_PAGE_SIZE) -> Page:
        # In (server, tool, key) order, the order SQLite lists in; the cursor is the last position listed.
        after = cursor_position(cursor)
        self._purge_expired()
        index = self._groups.get(match.group)
        if index is None:
            return Page((), None)
        candidates = (
            ((record.server, record.tool, key), record)
            for key in index.order
            if (record := self._peek(key)) is not None and match.matches(record.group, record.server, record.tool)
        )
        if after is not None:
            candidates = (candidate for candidate in candidates if candidate[0] > after)
        chosen = heapq.nsmallest(limit + 1, candidates, key=lambda candidate: candidate[0])
        more = len(chosen) > limit
        entries = tuple(_listed(position[2], record) for position, record in chosen[:limit])
        last = chosen[limit - 1][0] if more else None
        return Page(entries, None if last is None else position_cursor(*last))

    async def count(self, match: Match) -> Usage:
        self._purge_expired()
        index = self._groups.get(match.group)
        if index is None:
            return Usage(0, 0)
        records = [self._peek(key) for key in index.order]
        chosen = [r for r in records if r is not None and match.matches(r.group, r.server, r.tool)]
        return Usage(items=len(chosen), bytes=sum(record.size for record in chosen))

    async def remove_matching(self, match: Match) -> int:
        self._purge_expired()
        index = self._groups.get(match.group)
        if index is None:
            return 0
        doomed = [
            key
            for key in index.order
            if (record := self._peek(key)) is not None and match.matches(record.group, record.server, record.tool)
        ]
        for key in doomed:
            self._delete(key)
        return len(doomed)

    async def remove_all(self) -> None:
        self._items.clear()
        self._groups.clear()
        self._expiry.clear()

    async def close(self) -> None:
        await self.remove_all()

    def _insert(self, key: str, record: _Record) -> bool:
        """Store a record under a key that is not present, honouring expiry and both bounds; True if stored."""
        if record.expires_at is not None and record.expires_at <= self._clock():
            return False
        if self.limits.max_bytes is not None and record.size > self.limits.max_bytes:
            return False
        self._items[key] = record  # evicts least-recently-used records (through _unindex) until it fits
        index = self._groups.get(record.group)
        if index is None:
            index = self._groups[record.group] = _GroupIndex()
        index.order[key] = None
        index.bytes += record.size
        if self.limits.max_items is not None:
            while len(self._items) > self.limits.max_items:
                self._items.popitem()
        if record.expires_at is not None:
            heapq.heappush(self._expiry, (record.expires_at, record.seq, key))
        return True

    def _delete(self, key: str) -> None:
        record = self._peek(key)
        if record is not None:
            del self._items[key]
            self._unindex(key, record)

    def _unindex(self, key: str, record: _Record) -> None:
        index = self._groups[record.group]
        del index.order[key]
        index.bytes -= record.size
        if not index.order:
            del self._groups[record.group]

    def _peek(self, key: str) -> _Record | None:
        """The record without counting a use (LRUCache's own lookup would move it to the recent end)."""
        return Cache.__getitem__(self._items, key) if key in self._items else None

    def _created_at(self, key: str) -> float:
        record = self._peek(key)
        assert record is not None
        return record.created_at

    def _purge_expired(self) -> None:
        """Drop every expired record: the heap makes this cost proportional to what actually expired."""
        now = self._clock()
        heap = self._expiry
        while heap and heap[0][0] <= now:
            _, seq, key = heapq.heappop(heap)
            record = self._peek(key)
            if record is not None and record.seq == seq:
                self._delete(key)
        # Replaced and removed records leave their heap entries behind; rebuild before they outnumber the live.
        if len(heap) > 2 * len(self._items) + 64:
            live = ((self._peek(key), key) for key in self._items)
            self._expiry = [(r.expires_at, r.seq, k) for r, k in live if r is not None and r.expires_at is not None]
            heapq.heapify(self._expiry)


def _listed(key: str, record: _Record) -> Listed:
    meta = decode_meta(record.meta) or {}
    return Listed(key, record.item(meta, with_body=False), record.size)
