"""The embedded default store: one SQLite file that survives restarts and is shared by local processes.

A cache must never cost more than it saves, so this store is built around what goes wrong with SQLite files
(a lock held elsewhere, a file that is not a store any more, a log that grows without end) rather than
hoping to miss it.

Locks. WAL mode: readers never wait for the writer and the writer never waits for readers.
- Loads and `usage` run on read connections of their own (a small pool, one connection per worker thread
  at a time), never on the writer's connection and never under this process's write lock: a load does not
  queue behind a save, in this process or another. Recording a load's use for LRU is a write, so it is
  queued and applied by this process's next write (and on close). The one exception: a load that finds a
  corrupt record tries to delete it at once, without waiting; if the lock is taken, the next write does it.
- Every write is one BEGIN IMMEDIATE transaction on the single writer connection, taking SQLite's write lock
  up front (a deferred transaction that upgrades to a writer fails at once with SQLITE_BUSY, busy timeout or
  not). The wait for it, this process's own writers included, is bounded by `busy_timeout_s`, 0.25 s by
  default: a write holds the lock for milliseconds, so a quarter second covers ordinary contention between
  several processes, while a lock held longer belongs to a long transaction elsewhere that waiting will not
  outlast. It also stays well inside the tool cache's 1 s store deadline, so a held lock costs a skipped save,
  never a missed deadline (which would make the cache skip the store, loads included, for its cooldown).
  A write that gives up raises `SQLiteBusyError`, naming the file and the wait; the cache skips the save.
- Every thread hop can be abandoned by the caller's cancel scope (`abandon_on_cancel=True`): the cache's
  deadline returns at once, and the abandoned operation finishes on its own in its thread, still holding
  its connection (every connection is used by one thread at a time), so it cannot corrupt anything.

Fresh hits without a thread hop (`peek_now`): the items the last peeks found are kept while SQLite's
`data_version`, read on a connection of the store's own, is unchanged; any commit to the file by any other
connection, in this process (the writer) or another, changes it and drops them (`mcpcache.stores.sqlite_peeks`).

Self-repair and newer schemas: a file that is not a usable store is moved aside and replaced; a newer
mcpcache's file is left alone for a file beside it (`mcpcache.stores.sqlite_file`).

Disk. The byte bound counts items (body plus metadata); SQLite's write-ahead log comes on top. It is kept
small: `journal_size_limit` and, once the log passes `checkpoint_at` (a quarter of the byte bound, between
1 MiB and 64 MiB), a checkpoint after the write (TRUNCATE, without waiting; what it cannot do now is left for
the next one). A reader in another process holding a read transaction pins the log: no checkpoint can reset
it and every write appends. So a save that would take the log past `wal_cap` (the byte bound, at least 4 MiB)
first tries a checkpoint and, if the log is still pinned, is skipped (`SQLiteWalFullError`, a kind of
`SQLiteBusyError`) until a checkpoint succeeds. See `SQLiteStore` for the resulting bound on disk use.

Bodies live in their own table: SQLite rewrites a whole row on any update, and a load's LRU touch or a
revalidation's metadata refresh must not rewrite a 20 MB body. Byte and item totals are kept by triggers
in the same transaction as the change, so enforcing the bound costs one row read, never a SUM.

The body's checksum, tag and stamp live in the item row. The stamp and tag comparisons of `save` and
`update_meta` run inside the same BEGIN IMMEDIATE transaction as the write they guard, so no other
connection (in this process or another) writes between the comparison and the change. A load verifies the
body against its checksum; a corrupt record is deleted by a write transaction that first reads it again
and leaves it alone if another connection has replaced it since.

Files this store creates (the database, and SQLite's `-wal` and `-shm`, which take the database's mode) are
readable by their owner only (0600): cached tool answers can be private.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread

from mcpcache.stores import sqlite_listing as listing
from mcpcache.stores.base import Store
from mcpcache.stores.items import (
    DEFAULT_PAGE_SIZE,
    Item,
    Match,
    Page,
    StoreLimits,
    Usage,
    body_checksum,
    check_stamp,
    cursor_position,
    encode_meta,
)
from mcpcache.stores.sqlite_file import (
    HEAD_ITEM,
    PEEK_ITEM,
    SCHEMA_VERSION,
    SELECT_ITEM,
    NewerSchema,
    NotAStore,
    create_private,
    decode_row,
    file_identity,
    is_busy,
    is_later,
    is_not_a_store,
    move_aside,
    path_beside,
    prepare,
)
from mcpcache.stores.sqlite_peeks import KeptPeeks

__all__ = [
    "DEFAULT_BUSY_TIMEOUT_S",
    "DEFAULT_MAX_BYTES",
    "SCHEMA_VERSION",
    "SQLiteBusyError",
    "SQLiteStore",
    "SQLiteWalFullError",
]

logger = logging.getLogger("mcpcache.stores.sqlite")

T = TypeVar("T")

MiB = 1024 * 1024

DEFAULT_MAX_BYTES = 1024 * MiB
"""The bound when no limits are given: a cache file that grows without end fills a disk eventually."""

DEFAULT_BUSY_TIMEOUT_S = 0.25
"""How long a write waits for the write lock by default (see the module docstring for why)."""

_MAX_IDLE_READERS = 4
_UNBOUNDED_WAL_BASIS = 256 * MiB
"""What the log thresholds are derived from when the store has no byte bound."""

_MAX_PENDING_TOUCHES = 10_000
_EVICTION_BATCH = 64
_REMOVAL_BATCH = 500

MMAP_SIZE = 256 * MiB
"""`PRAGMA mmap_size` of every connection: pages are read from the mapped file instead of copied into
SQLite's page cache first (a 20 MB body is 5,000 pages; read through a 2 MB page cache it was also 5,000
page-cache evictions). Reads of the same pages by several processes share the OS page cache."""

_NEXT_TICK = "(SELECT COALESCE(MAX(accessed), 0) + 1 FROM items WHERE ns = :ns)"
"""The LRU clock: one past the newest use in the namespace (an index lookup), strictly ordered even when
the wall clock is frozen or two uses land in the same microsecond."""


class SQLiteBusyError(sqlite3.OperationalError):
    """Another connection held the file's write lock for longer than the store's busy timeout."""


class SQLiteWalFullError(SQLiteBusyError):
    """A save was skipped: the write-ahead log is at its cap and a reader elsewhere keeps it from being reset."""


class SQLiteStore(Store):
    """A store in one SQLite file: WAL, bounded in bytes with LRU eviction, safe for several processes.

    Disk use: the database file and its write-ahead log together stay within 3 x `max(max_bytes, 4 MiB)` for
    items of a kilobyte or more (measured: see benchmarks/store_faults.py), even while a reader in another
    process pins the log. Of that, the file holds the items (at most `max_bytes`) plus SQLite's page and
    index overhead, and the log stays under `wal_cap` (`max(max_bytes, 4 MiB)`) plus one save. Very small
    items carry a per-row overhead (keys, indexes: about 200 bytes) that the byte bound does not count.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        limits: StoreLimits | None = None,
        *,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
        namespace: str = "mcpcache",
        mmap_size: int = MMAP_SIZE,
    ) -> None:
        if busy_timeout_s < 0:
            raise ValueError(f"busy_timeout_s must be >= 0, got {busy_timeout_s!r}")
        self.path = Path(path)
        self.limits = limits if limits is not None else StoreLimits(max_bytes=DEFAULT_MAX_BYTES)
        self.busy_timeout_s = busy_timeout_s
        self.namespace = namespace
        if isinstance(mmap_size, bool) or not isinstance(mmap_size, int) or mmap_size < 0:
            raise ValueError(f"mmap_size must be an int >= 0, got {mmap_size!r}")
        self.mmap_size = mmap_size
        """Bytes of the file its read connections map into memory (`PRAGMA mmap_size`; 0: none)."""
        basis = self.limits.max_bytes if self.limits.max_bytes is not None else _UNBOUNDED_WAL_BASIS
        self.checkpoint_at = min(max(basis // 4, 1 * MiB), 64 * MiB)
        """Once the write-ahead log is larger, a write is followed by a checkpoint."""
        self.wal_cap = max(basis, 4 * MiB)
        """A save that would take the write-ahead log past this is skipped if a checkpoint cannot reset it."""
        self._clock = clock
        self._write_lock = threading.Lock()
        """Held by the one thread using the writer connection."""
        self._open_lock = threading.Lock()
        """Guards which file is open, the writer's creation and the idle read connections."""
        self._touch_lock = threading.Lock()
        self._active: Path | None = None
        """The file in use: `path`, or the file beside it when `path` belongs to a newer mcpcache."""
        self._identity: tuple[int, int] | None = None
        """(device, inode) of the file opened, to tell a file replaced by another process from ours."""
        self._generation = 0
        self._writer: sqlite3.Connection | None = None
        self._idle_readers: list[sqlite3.Connection] = []
        self._closed = False
        self._pending_touches: OrderedDict[str, None] = OrderedDict()
        self._pending_drops: set[str] = set()
        self._peeks = KeptPeeks(self._connect)
        """What `peek_now` answers from (a subclass never uses it: it is asked its way)."""

    def now(self) -> float:
        return self._clock()

    @property
    def active_path(self) -> Path:
        """The file the store uses: `path`, or the file beside it when `path` holds a newer schema."""
        return self._active if self._active is not None else self.path

    # -- the interface -------------------------------------------------------------------------------------

    async def load(self, key: str) -> Item | None:
        # In a read transaction: the item row and its body are read apart (see `HEAD_ITEM`).
        items: list[Item | None] = await self._run(self._read, self._load_many, [key])
        return items[0]

    async def load_many(self, keys: Sequence[str]) -> list[Item | None]:
        # One thread hop for all of them: the hop, not the query, is most of a small load's cost.
        return await self._run(self._read, self._load_many, list(keys))

    async def peek_many(self, keys: Sequence[str]) -> list[Item | None]:
        # The version `peek_now` read before this peek began: whatever is read now is at least that recent.
        version = self._peeks.version()
        # One read transaction for all of them, so the items are one consistent snapshot.
        items: list[Item | None] = await self._run(self._read, self._peek_many_watched, list(keys))
        if version is not None and type(self) is SQLiteStore:
            self._peeks.keep(version, keys, items)
        return items

    def peek_now(self, keys: Sequence[str]) -> list[Item | None] | None:
        """What `peek_many` found for `keys` last, answered without a thread hop while the file has not
        changed since: SQLite's `data_version` on a connection of this store's own (a read of shared memory,
        a couple of microseconds, never waiting for a lock) is what it was when those peeks began. Any
        commit to the file since, by any connection in any process (and a checkpoint), changes it: the
        kept items are dropped and the caller is sent to `peek_many`. So is a key not peeked before, an
        item expired since, and any failure. A peek answered here counts as a use, as any peek does. The
        items are shared between calls: a caller reads them and never changes them."""
        if type(self) is not SQLiteStore:
            return None  # a subclass (counting, failing, waiting) is asked its way
        items = self._peeks.answer(keys, self._generation, self._clock())
        if items is None:
            return None
        with self._touch_lock:
            for key, item in zip(keys, items, strict=True):
                if item is not None:
                    self._pending_touches[key] = None
                    self._pending_touches.move_to_end(key)
            while len(self._pending_touches) > _MAX_PENDING_TOUCHES:
                self._pending_touches.popitem(last=False)
        return items

    async def save(self, key: str, item: Item) -> bool:
        stamp = check_stamp(item.stamp)
        meta = encode_meta(item.meta)
        incoming = len(meta) + len(item.body)
        return await self._run(self._write_op, incoming, self._save, key, item, meta, stamp, body_checksum(item.body))

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
        return await self._run(
            self._write_op, 0, self._update_meta, key, encode_meta(meta), expires_at, if_tag, new_stamp
        )

    async def remove(self, key: str) -> None:
        await self._run(self._write_op, 0, self._delete_key, key)

    async def remove_group(self, group: str) -> int:
        return await self._run(self._write_op, 0, self._remove_group, group)

    async def remove_created_before(self, group_prefix: str, created_before: float) -> int:
        return await self._run(self._write_op, 0, self._remove_created_before, group_prefix, created_before)

    async def trim_group(self, group: str, max_bytes: int) -> int:
        return await self._run(self._write_op, 0, self._trim_group, group, max_bytes)

    async def usage(self, group: str | None = None) -> Usage:
        return await self._run(self._read, self._usage, group)

    async def remove_all(self) -> None:
        await self._run(self._write_op, 0, self._remove_all)

    async def list_page(self, match: Match, cursor: str | None = None, limit: int = DEFAULT_PAGE_SIZE) -> Page:
        # One indexed range per page (`LISTING_INDEX`), on a read connection: never a body, never a use.
        after = cursor_position(cursor)
        return await self._run(self._read, listing.list_page, self.namespace, self._clock(), match, after, limit)

    async def count(self, match: Match) -> Usage:
        return await self._run(self._read, listing.count, self.namespace, self._clock(), match)

    async def remove_matching(self, match: Match) -> int:
        # In batches, each its own write transaction: a large removal never holds the write lock for long.
        removed = 0
        while True:
            batch: int = await self._run(
                self._write_op, 0, listing.remove_matching, self.namespace, self._clock(), match, _REMOVAL_BATCH
            )
            removed += batch
            if batch < _REMOVAL_BATCH:
                return removed

    async def close(self) -> None:
        await anyio.to_thread.run_sync(self._close, abandon_on_cancel=True)

    # -- plumbing: thread hops, connections ----------------------------------------------------------------

    async def _run(self, runner: Callable[..., T], *args: Any) -> T:
        # Abandoned on cancel: the caller's deadline returns at once; the thread finishes the operation with
        # its connection held, so no other thread can use that connection in the meantime.
        return await anyio.to_thread.run_sync(runner, *args, abandon_on_cancel=True)

    def _busy_error(self, exc: BaseException | None = None) -> SQLiteBusyError:
        return SQLiteBusyError(
            f"{self.active_path}: the write lock is held by another connection; gave up after "
            f"{self.busy_timeout_s:g} s (busy_timeout_s)"
        )

    def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` on a read connection; a file found not to be a store is repaired and `fn` run again."""
        for attempt in (1, 2):
            conn, generation = self._take_reader()
            try:
                return fn(conn, *args)
            except sqlite3.DatabaseError as exc:
                if attempt == 2 or not is_not_a_store(exc):
                    raise
                fault = exc
            finally:
                self._give_back(conn, generation)
            if not self._write_lock.acquire(timeout=self.busy_timeout_s):
                raise fault  # another thread is writing; it, or the next call, repairs the file
            try:
                self._repair(generation, str(fault))
            finally:
                self._write_lock.release()
        raise AssertionError("unreachable")

    def _write_op(self, incoming: int, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` in one write transaction on the writer connection, within the busy timeout overall."""
        give_up = time.monotonic() + self.busy_timeout_s
        if not self._write_lock.acquire(timeout=self.busy_timeout_s):
            raise self._busy_error()
        try:
            for attempt in (1, 2):
                generation, conn = self._writer_connection()
                try:
                    return self._write_on(conn, give_up, incoming, fn, *args)
                except sqlite3.DatabaseError as exc:
                    if attempt == 2 or not is_not_a_store(exc):
                        raise
                    self._repair(generation, str(exc))
            raise AssertionError("unreachable")
        finally:
            self._write_lock.release()

    def _write_on(self, conn: sqlite3.Connection, give_up: float, incoming: int, fn: Callable[..., T], *args: Any) -> T:
        if incoming:
            self._check_wal_room(conn, incoming)
        remaining_ms = max(0, int((give_up - time.monotonic()) * 1000))
        conn.execute(f"PRAGMA busy_timeout = {remaining_ms}")
        try:
            result = self._write(conn, fn, *args)
        except sqlite3.OperationalError as exc:
            if is_busy(exc) and not isinstance(exc, SQLiteBusyError):
                raise self._busy_error() from exc
            raise
        if self._wal_size() > self.checkpoint_at:
            self._checkpoint(conn)
        return result

    def _writer_connection(self) -> tuple[int, sqlite3.Connection]:
        """The writer connection (the caller holds the write lock), opening the file if need be."""
        with self._open_lock:
            self._ensure_open()
            assert self._writer is not None
            return self._generation, self._writer

    def _take_reader(self) -> tuple[sqlite3.Connection, int]:
        with self._open_lock:
            self._ensure_open()
            generation, active = self._generation, self._active
            if self._idle_readers:
                return self._idle_readers.pop(), generation
        assert active is not None
        conn = self._connect(active)
        try:
            conn.execute("PRAGMA query_only = 1")
            conn.execute(f"PRAGMA mmap_size = {self.mmap_size}").fetchall()
        except BaseException:
            conn.close()
            raise
        return conn, generation

    def _give_back(self, conn: sqlite3.Connection, generation: int) -> None:
        with self._open_lock:
            if (
                generation == self._generation
                and not self._closed
                and not conn.in_transaction
                and len(self._idle_readers) < _MAX_IDLE_READERS
            ):
                self._idle_readers.append(conn)
                return
        conn.close()

    def _connect(self, path: Path) -> sqlite3.Connection:
        return sqlite3.connect(path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False)

    def _ensure_open(self) -> None:
        """Open the file (the caller holds `_open_lock`): the writer connection, the schema, repairs at open."""
        if self._closed:
            raise RuntimeError("the SQLiteStore is closed")
        if self._writer is not None:
            return
        path = self.path
        for _ in range(3):  # a repair, then possibly the file beside a newer one, then its repair
            if path.is_dir():
                move_aside(path, "a directory is at the path", None)
                continue
            create_private(path)
            identity = file_identity(path)
            conn = self._connect(path)
            try:
                prepare(conn, path, busy_timeout_s=self.busy_timeout_s, journal_size_limit=self.checkpoint_at)
            except NewerSchema as newer:
                conn.close()
                beside = path_beside(self.path)
                if path == beside:
                    raise RuntimeError(f"{path}: {newer}") from None
                logger.warning("%s: %s; leaving it alone for that version and using %s beside it", path, newer, beside)
                path = beside
                continue
            except (NotAStore, sqlite3.DatabaseError) as exc:
                conn.close()
                if isinstance(exc, sqlite3.DatabaseError) and not is_not_a_store(exc):
                    if is_busy(exc):
                        raise self._busy_error() from exc
                    raise
                move_aside(path, str(exc), identity)
                continue
            except BaseException:
                conn.close()
                raise
            self._writer, self._active, self._identity = conn, path, identity
            return
        raise RuntimeError(f"{self.path}: could not open a usable store")

    def _repair(self, generation: int, reason: str) -> None:
        """Move the open file aside (it is not a store) and open a new one. The caller holds the write lock."""
        with self._open_lock:
            if generation != self._generation:
                return  # another thread repaired it already
            self._generation += 1
            path, identity = self._active, self._identity
            for conn in self._idle_readers:
                conn.close()
            self._idle_readers.clear()
            if self._writer is not None:
                self._writer.close()
            self._writer, self._active, self._identity = None, None, None
            with self._touch_lock:
                self._pending_touches.clear()
                self._pending_drops.clear()
            if path is not None:
                move_aside(path, reason, identity)
            self._ensure_open()

    def _close(self) -> None:
        with self._open_lock:
            self._closed = True
            for conn in self._idle_readers:
                conn.close()
            self._idle_readers.clear()
        self._peeks.close()
        # An abandoned write may still be finishing: give it a moment, then leave its connection to it.
        if not self._write_lock.acquire(timeout=max(self.busy_timeout_s, 1.0)):
            return
        try:
            with self._open_lock:
                writer, self._writer = self._writer, None
            if writer is not None:
                try:
                    if self._pending_touches or self._pending_drops:
                        self._try_flush(writer)
                finally:
                    writer.close()
        finally:
            self._write_lock.release()

    # -- plumbing: the write-ahead log ---------------------------------------------------------------------

    def _wal_size(self) -> int:
        active = self.active_path
        try:
            return os.stat(active.with_name(active.name + "-wal")).st_size
        except OSError:
            return 0

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """Copy the log into the file and truncate it, without waiting for anyone: a reader that pins the log
        leaves it as it is (SQLite still copies what it can), for the next attempt."""
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise

    def _check_wal_room(self, conn: sqlite3.Connection, incoming: int) -> None:
        if self._wal_size() + incoming <= self.wal_cap:
            return
        self._checkpoint(conn)
        size = self._wal_size()
        if size + incoming > self.wal_cap:
            raise SQLiteWalFullError(
                f"{self.active_path}: the write-ahead log is {size / MiB:.1f} MiB and a save of "
                f"{incoming / MiB:.1f} MiB would pass its cap of {self.wal_cap / MiB:.1f} MiB; a read transaction "
                "in another process keeps it from being checkpointed, so saves are skipped until it ends"
            )

    def _write(self, conn: sqlite3.Connection, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` in one write transaction, after applying queued touches and drops and dropping expired items."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._flush_pending(conn)
            conn.execute(
                "DELETE FROM items WHERE ns = ? AND expires_at <= ?",
                (self.namespace, self._clock()),
            )
            result = fn(conn, *args)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result

    # -- operations: loads and usage on a read connection, the rest inside `_write` --------------------------

    def _load_many(self, conn: sqlite3.Connection, keys: list[str]) -> list[Item | None]:
        return self._in_read_transaction(conn, keys, with_body=True)

    def _peek_many(self, conn: sqlite3.Connection, keys: list[str]) -> list[Item | None]:
        return self._in_read_transaction(conn, keys, with_body=False)

    def _peek_many_watched(self, conn: sqlite3.Connection, keys: list[str]) -> list[Item | None]:
        """`_peek_many`, opening `peek_now`'s connection first if the file in use has none (in this thread:
        opening a file is not for the event loop's)."""
        if type(self) is SQLiteStore:
            with self._open_lock:
                active, generation = self._active, self._generation
            self._peeks.ensure(active, generation)
        return self._peek_many(conn, keys)

    def _in_read_transaction(self, conn: sqlite3.Connection, keys: list[str], *, with_body: bool) -> list[Item | None]:
        """Each key's item, all read in one read transaction (one snapshot: an item row and its body, and
        every key, as they were at one moment)."""
        conn.execute("BEGIN")
        try:
            items = [self._load(conn, key, with_body=with_body) for key in keys]
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")  # ends the read transaction at once: an open one would pin the log
        return items

    def _load(self, conn: sqlite3.Connection, key: str, *, with_body: bool = True) -> Item | None:
        # fetchall, never fetchone: a statement left open keeps its read transaction, which pins the log.
        rows = conn.execute(HEAD_ITEM if with_body else PEEK_ITEM, (self.namespace, key)).fetchall()
        if not rows:
            return None
        row = rows[0]
        if with_body:
            row = (*row[:-1], self._read_body(conn, row[0], row[-1]))
        item, fault = decode_row(row, verify=with_body)
        if item is None:
            logger.warning("%s: dropping a corrupt record under key %r: %s", self.active_path, key, fault)
            self._drop_now_or_later(key)
            return None
        if item.expires_at is not None and item.expires_at <= self._clock():
            return None  # deleted by the next write
        with self._touch_lock:
            self._pending_touches[key] = None
            self._pending_touches.move_to_end(key)
            while len(self._pending_touches) > _MAX_PENDING_TOUCHES:
                self._pending_touches.popitem(last=False)
        return item

    @staticmethod
    def _read_body(conn: sqlite3.Connection, item_id: object, kind: object) -> object:
        """The body of item `item_id` (inside the caller's read transaction): bytes for a blob, None when
        there is none, and whatever else is there as SQLite has it (the row is then corrupt)."""
        if kind == "null" or not isinstance(item_id, int):
            return None
        if kind != "blob":
            rows = conn.execute("SELECT body FROM bodies WHERE item_id = ?", (item_id,)).fetchall()
            return rows[0][0] if rows else None
        try:
            with conn.blobopen("bodies", "body", item_id, readonly=True) as blob:
                return blob.read()
        except sqlite3.OperationalError as exc:
            if "no such rowid" in str(exc):
                return None
            raise

    def _save(self, conn: sqlite3.Connection, key: str, item: Item, meta: bytes, stamp: float, checksum: str) -> bool:
        # Inside `_write`'s transaction, after expired rows were deleted: a row found here is live.
        row = conn.execute("SELECT stamp FROM items WHERE ns = ? AND key = ?", (self.namespace, key)).fetchone()
        if row is not None and is_later(row[0], stamp):
            return False
        self._delete_key(conn, key)
        size = len(meta) + len(item.body)
        if item.expires_at is not None and item.expires_at <= self._clock():
            return False
        if self.limits.max_bytes is not None and size > self.limits.max_bytes:
            return False
        self._make_room(conn, incoming_bytes=size, incoming_items=1)
        cursor = conn.execute(
            "INSERT INTO items (ns, key, grp, size, created_at, expires_at, accessed, meta, tag, stamp, checksum,"
            f" server, tool) VALUES (:ns, :key, :grp, :size, :created_at, :expires_at, {_NEXT_TICK}, :meta, :tag,"
            " :stamp, :checksum, :server, :tool)",
            {
                "ns": self.namespace,
                "key": key,
                "grp": item.group,
                "size": size,
                "created_at": item.created_at,
                "expires_at": item.expires_at,
                "meta": meta,
                "tag": item.tag,
                "stamp": stamp,
                "checksum": checksum,
                "server": item.server,
                "tool": item.tool,
            },
        )
        conn.execute("INSERT INTO bodies (item_id, body) VALUES (?, ?)", (cursor.lastrowid, item.body))
        return True

    def _update_meta(
        self,
        conn: sqlite3.Connection,
        key: str,
        meta: bytes,
        expires_at: float | None,
        if_tag: str | None,
        stamp: float | None,
    ) -> bool:
        row = conn.execute(
            "SELECT id, size - length(CAST(meta AS BLOB)), tag, stamp FROM items WHERE ns = ? AND key = ?",
            (self.namespace, key),
        ).fetchone()
        if row is None:
            return False
        item_id, body_size, tag, held_stamp = row
        if if_tag is not None and tag != if_tag:  # a tag of another type (a corrupt row) never matches
            return False
        if stamp is not None and is_later(held_stamp, stamp):
            return False
        size = int(body_size) + len(meta)
        if (expires_at is not None and expires_at <= self._clock()) or (
            self.limits.max_bytes is not None and size > self.limits.max_bytes
        ):
            conn.execute("DELETE FROM items WHERE id = ?", (item_id,))
            return True
        conn.execute(
            f"UPDATE items SET meta = :meta, expires_at = :expires_at, size = :size, accessed = {_NEXT_TICK},"
            " stamp = COALESCE(:stamp, stamp) WHERE id = :id",
            {
                "meta": meta,
                "expires_at": expires_at,
                "size": size,
                "stamp": stamp,
                "id": item_id,
                "ns": self.namespace,
            },
        )
        self._make_room(conn, incoming_bytes=0, incoming_items=0, keep=item_id)
        return True

    def _delete_key(self, conn: sqlite3.Connection, key: str) -> None:
        conn.execute("DELETE FROM items WHERE ns = ? AND key = ?", (self.namespace, key))

    def _remove_group(self, conn: sqlite3.Connection, group: str) -> int:
        return conn.execute("DELETE FROM items WHERE ns = ? AND grp = ?", (self.namespace, group)).rowcount

    def _remove_created_before(self, conn: sqlite3.Connection, group_prefix: str, created_before: float) -> int:
        # The range keeps the group index usable; substr makes the prefix test exact whatever the upper bound.
        sql = "DELETE FROM items WHERE ns = ? AND grp >= ? AND substr(grp, 1, ?) = ? AND created_at < ?"
        params: list[object] = [self.namespace, group_prefix, len(group_prefix), group_prefix, created_before]
        upper = _prefix_upper_bound(group_prefix)
        if upper is not None:
            sql += " AND grp < ?"
            params.append(upper)
        return conn.execute(sql, params).rowcount

    def _trim_group(self, conn: sqlite3.Connection, group: str, max_bytes: int) -> int:
        row = conn.execute("SELECT bytes FROM group_usage WHERE ns = ? AND grp = ?", (self.namespace, group)).fetchone()
        held = 0 if row is None else int(row[0])
        evicted = 0
        while held > max_bytes:
            batch = conn.execute(
                "SELECT id, size FROM items WHERE ns = ? AND grp = ? ORDER BY accessed LIMIT ?",
                (self.namespace, group, _EVICTION_BATCH),
            ).fetchall()
            if not batch:
                break
            for item_id, size in batch:
                conn.execute("DELETE FROM items WHERE id = ?", (item_id,))
                held -= int(size)
                evicted += 1
                if held <= max_bytes:
                    break
        return evicted

    def _make_room(
        self, conn: sqlite3.Connection, *, incoming_bytes: int, incoming_items: int, keep: int | None = None
    ) -> None:
        """Evict least-recently-used items (never `keep`) until the namespace fits its bounds with the incoming."""
        max_bytes, max_items = self.limits.max_bytes, self.limits.max_items
        if max_bytes is None and max_items is None:
            return
        row = conn.execute("SELECT items, bytes FROM ns_usage WHERE ns = ?", (self.namespace,)).fetchone()
        items, held = (0, 0) if row is None else (int(row[0]), int(row[1]))

        def over() -> bool:
            return (max_bytes is not None and held + incoming_bytes > max_bytes) or (
                max_items is not None and items + incoming_items > max_items
            )

        while over():
            batch = conn.execute(
                "SELECT id, size FROM items WHERE ns = ? AND id IS NOT ? ORDER BY accessed LIMIT ?",
                (self.namespace, keep, _EVICTION_BATCH),
            ).fetchall()
            if not batch:
                break
            for item_id, size in batch:
                conn.execute("DELETE FROM items WHERE id = ?", (item_id,))
                items -= 1
                held -= int(size)
                if not over():
                    break

    def _usage(self, conn: sqlite3.Connection, group: str | None) -> Usage:
        now = self._clock()
        if group is None:
            total = conn.execute("SELECT items, bytes FROM ns_usage WHERE ns = ?", (self.namespace,)).fetchall()
            expired = conn.execute(
                "SELECT count(*), COALESCE(SUM(size), 0) FROM items WHERE ns = ? AND expires_at <= ?",
                (self.namespace, now),
            ).fetchall()[0]
        else:
            total = conn.execute(
                "SELECT items, bytes FROM group_usage WHERE ns = ? AND grp = ?", (self.namespace, group)
            ).fetchall()
            expired = conn.execute(
                "SELECT count(*), COALESCE(SUM(size), 0) FROM items WHERE ns = ? AND expires_at <= ? AND grp = ?",
                (self.namespace, now, group),
            ).fetchall()[0]
        # Expired rows wait for the next write to be deleted (usage stays a read); they are not counted.
        # fetchall, never fetchone: a statement left open keeps its read transaction, which pins the log.
        items, held = (0, 0) if not total else (int(total[0][0]), int(total[0][1]))
        return Usage(items=items - int(expired[0]), bytes=held - int(expired[1]))

    def _remove_all(self, conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM items WHERE ns = ?", (self.namespace,))
        with self._touch_lock:
            self._pending_touches.clear()

    # -- queued touches and drops --------------------------------------------------------------------------

    def _flush_pending(self, conn: sqlite3.Connection) -> None:
        """Apply queued uses, oldest first, and queued drops, inside the caller's write transaction."""
        with self._touch_lock:
            touches = list(self._pending_touches)
            self._pending_touches.clear()
            drops = sorted(self._pending_drops)
            self._pending_drops.clear()
        for key in touches:
            conn.execute(
                f"UPDATE items SET accessed = {_NEXT_TICK} WHERE ns = :ns AND key = :key",
                {"ns": self.namespace, "key": key},
            )
        for key in drops:
            self._drop_if_unusable(conn, key)

    def _try_flush(self, conn: sqlite3.Connection) -> None:
        """Apply what is queued if the write lock is free right now; never waits."""
        if not self._begin_without_waiting(conn):
            return
        try:
            self._flush_pending(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _drop_now_or_later(self, key: str) -> None:
        """Delete a corrupt record found by a load: now if this process's write lock and SQLite's are free,
        otherwise by the next write. Never waits."""
        with self._touch_lock:
            self._pending_drops.add(key)
        if not self._write_lock.acquire(blocking=False):
            return
        try:
            with self._open_lock:
                writer = self._writer
            if writer is not None:
                self._try_flush(writer)
        finally:
            self._write_lock.release()

    def _drop_if_unusable(self, conn: sqlite3.Connection, key: str) -> None:
        """Inside a write transaction: delete the record under `key` if it is still corrupt or expired. The
        load that found it read outside any write transaction, so another connection may have replaced it
        since: the record is read again under the write lock and a sound replacement is left alone."""
        row = conn.execute(SELECT_ITEM, (self.namespace, key)).fetchone()
        if row is not None:
            item, _ = decode_row(row)
            if item is None or (item.expires_at is not None and item.expires_at <= self._clock()):
                conn.execute("DELETE FROM items WHERE id = ?", (row[0],))

    def _begin_without_waiting(self, conn: sqlite3.Connection) -> bool:
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                return False
            raise
        return True


def _prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string above every string that starts with `prefix` (code point order, as SQLite's
    BINARY collation compares UTF-8), or None when there is none."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1]) + 1
        if code == 0xD800:  # surrogates cannot be encoded; the next character is U+E000
            code = 0xE000
        if code <= 0x10FFFF:
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None
