"""The embedded default store: one SQLite file that survives restarts and is shared by local processes.

"database is locked" is the most reported failure of SQLite-backed Python caches, so this store is built
around SQLite's locking rather than hoping to miss it:
- WAL mode, so readers never wait for the writer and the writer never waits for readers;
- every multi-statement write opens with BEGIN IMMEDIATE, taking the write lock up front (a deferred
  transaction that upgrades to a writer fails at once with SQLITE_BUSY, busy timeout or not), and waits
  for it up to `busy_timeout_s`; a timeout surfaces as `SQLiteBusyError`, naming the file and the wait;
- a load is a pure read. Recording the use for LRU is a separate write that never waits: if another
  process holds the write lock, the touch is queued and applied by this process's next write.

Bodies live in their own table: SQLite rewrites a whole row on any update, and a load's LRU touch or a
revalidation's metadata refresh must not rewrite a 20 MB body. Byte and item totals are kept by triggers
in the same transaction as the change, so enforcing the bound costs one row read, never a SUM.

The body's checksum, tag and stamp live in the item row. The stamp and tag comparisons of `save` and
`update_meta` run inside the same BEGIN IMMEDIATE transaction as the write they guard, so no other
connection (in this process or another) writes between the comparison and the change. A load verifies the
body against its checksum; a corrupt record is deleted by a write transaction that first reads it again
and leaves it alone if another connection has replaced it since.

One connection per store, used by one worker thread at a time under a lock (calls run through
`anyio.to_thread.run_sync`): SQLite admits one writer per file anyway, and queueing this process's own
writers on a lock is fair and immediate where SQLite's busy handler would make them poll with back-off.
Other processes are kept in order by SQLite's file locks.
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
from typing import Any, TypeGuard, TypeVar

import anyio.to_thread

from mcpcache.stores.base import (
    Item,
    Store,
    StoreLimits,
    Usage,
    body_checksum,
    check_stamp,
    decode_meta,
    encode_meta,
)

logger = logging.getLogger("mcpcache.stores.sqlite")

T = TypeVar("T")

DEFAULT_MAX_BYTES = 1024 * 1024 * 1024
"""The bound when no limits are given: a cache file that grows without end fills a disk eventually."""

SCHEMA_VERSION = 2
"""Kept in `PRAGMA user_version`; a file from a newer mcpcache is refused, an older one migrated.
Version 2 added the tag, stamp and checksum columns of `items`."""

_MAX_PENDING_TOUCHES = 10_000
_EVICTION_BATCH = 64

_SCHEMA = (
    """CREATE TABLE items (
        id INTEGER PRIMARY KEY,
        ns TEXT NOT NULL,
        key TEXT NOT NULL,
        grp TEXT NOT NULL,
        size INTEGER NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL,
        accessed INTEGER NOT NULL,
        meta BLOB NOT NULL,
        tag TEXT,
        stamp REAL NOT NULL,
        checksum TEXT NOT NULL,
        UNIQUE (ns, key)
    )""",
    "CREATE TABLE bodies (item_id INTEGER PRIMARY KEY, body BLOB NOT NULL)",
    "CREATE TABLE group_usage (ns TEXT NOT NULL, grp TEXT NOT NULL, items INTEGER NOT NULL, bytes INTEGER NOT NULL,"
    " PRIMARY KEY (ns, grp))",
    "CREATE TABLE ns_usage (ns TEXT PRIMARY KEY, items INTEGER NOT NULL, bytes INTEGER NOT NULL)",
    "CREATE INDEX items_lru ON items (ns, accessed)",
    "CREATE INDEX items_group_lru ON items (ns, grp, accessed)",
    "CREATE INDEX items_expiry ON items (ns, expires_at) WHERE expires_at IS NOT NULL",
    """CREATE TRIGGER items_counted AFTER INSERT ON items BEGIN
        INSERT INTO group_usage (ns, grp, items, bytes) VALUES (new.ns, new.grp, 1, new.size)
            ON CONFLICT (ns, grp) DO UPDATE SET items = items + 1, bytes = bytes + excluded.bytes;
        INSERT INTO ns_usage (ns, items, bytes) VALUES (new.ns, 1, new.size)
            ON CONFLICT (ns) DO UPDATE SET items = items + 1, bytes = bytes + excluded.bytes;
    END""",
    """CREATE TRIGGER items_uncounted AFTER DELETE ON items BEGIN
        DELETE FROM bodies WHERE item_id = old.id;
        UPDATE group_usage SET items = items - 1, bytes = bytes - old.size WHERE ns = old.ns AND grp = old.grp;
        DELETE FROM group_usage WHERE ns = old.ns AND grp = old.grp AND items <= 0;
        UPDATE ns_usage SET items = items - 1, bytes = bytes - old.size WHERE ns = old.ns;
    END""",
    # Moves the counts as a delete plus an insert would, so even a row rewritten by hand stays accounted for.
    """CREATE TRIGGER items_recounted AFTER UPDATE OF ns, grp, size ON items BEGIN
        UPDATE group_usage SET items = items - 1, bytes = bytes - old.size WHERE ns = old.ns AND grp = old.grp;
        DELETE FROM group_usage WHERE ns = old.ns AND grp = old.grp AND items <= 0;
        UPDATE ns_usage SET items = items - 1, bytes = bytes - old.size WHERE ns = old.ns;
        INSERT INTO group_usage (ns, grp, items, bytes) VALUES (new.ns, new.grp, 1, new.size)
            ON CONFLICT (ns, grp) DO UPDATE SET items = items + 1, bytes = bytes + excluded.bytes;
        INSERT INTO ns_usage (ns, items, bytes) VALUES (new.ns, 1, new.size)
            ON CONFLICT (ns) DO UPDATE SET items = items + 1, bytes = bytes + excluded.bytes;
    END""",
)

_TABLES = ("items", "bodies", "group_usage", "ns_usage")
"""Every table of the schema; dropping them drops their indexes and triggers too."""

_SELECT_ITEM = (
    "SELECT i.id, i.grp, i.meta, i.created_at, i.expires_at, i.tag, i.stamp, i.checksum, b.body"
    " FROM items AS i LEFT JOIN bodies AS b ON b.item_id = i.id WHERE i.ns = ? AND i.key = ?"
)

_NEXT_TICK = "(SELECT COALESCE(MAX(accessed), 0) + 1 FROM items WHERE ns = :ns)"
"""The LRU clock: one past the newest use in the namespace (an index lookup), strictly ordered even when
the wall clock is frozen or two uses land in the same microsecond."""


class SQLiteBusyError(sqlite3.OperationalError):
    """Another connection held the file's write lock for longer than the store's busy timeout."""


class SQLiteStore(Store):
    """A store in one SQLite file: WAL, bounded in bytes with LRU eviction, safe for several processes."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        limits: StoreLimits | None = None,
        *,
        busy_timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        namespace: str = "mcpcache",
    ) -> None:
        if busy_timeout_s < 0:
            raise ValueError(f"busy_timeout_s must be >= 0, got {busy_timeout_s!r}")
        self.path = Path(path)
        self.limits = limits if limits is not None else StoreLimits(max_bytes=DEFAULT_MAX_BYTES)
        self.busy_timeout_s = busy_timeout_s
        self.namespace = namespace
        self._clock = clock
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._pending_touches: OrderedDict[str, None] = OrderedDict()

    def now(self) -> float:
        return self._clock()

    # -- the interface -------------------------------------------------------------------------------------

    async def load(self, key: str) -> Item | None:
        return await self._run(self._load, key)

    async def load_many(self, keys: Sequence[str]) -> list[Item | None]:
        # One thread hop for all of them: the hop, not the query, is most of a small load's cost.
        return await self._run(self._load_many, list(keys))

    async def save(self, key: str, item: Item) -> bool:
        stamp = check_stamp(item.stamp)
        meta = encode_meta(item.meta)
        return await self._run(self._write, self._save, key, item, meta, stamp, body_checksum(item.body))

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
        return await self._run(self._write, self._update_meta, key, encode_meta(meta), expires_at, if_tag, new_stamp)

    async def remove(self, key: str) -> None:
        await self._run(self._write, self._delete_key, key)

    async def remove_group(self, group: str) -> int:
        return await self._run(self._write, self._remove_group, group)

    async def remove_created_before(self, group_prefix: str, created_before: float) -> int:
        return await self._run(self._write, self._remove_created_before, group_prefix, created_before)

    async def trim_group(self, group: str, max_bytes: int) -> int:
        return await self._run(self._write, self._trim_group, group, max_bytes)

    async def usage(self, group: str | None = None) -> Usage:
        return await self._run(self._usage, group)

    async def remove_all(self) -> None:
        await self._run(self._write, self._remove_all)

    async def close(self) -> None:
        await anyio.to_thread.run_sync(self._close)

    # -- plumbing ------------------------------------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(self._locked, fn, *args)

    def _locked(self, fn: Callable[..., T], *args: Any) -> T:
        with self._lock:
            conn = self._connection()
            try:
                return fn(conn, *args)
            except sqlite3.OperationalError as exc:
                if _is_busy(exc) and not isinstance(exc, SQLiteBusyError):
                    raise SQLiteBusyError(
                        f"{self.path}: the write lock is held by another connection; gave up after "
                        f"{self.busy_timeout_s:g} s (busy_timeout_s)"
                    ) from exc
                raise

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise RuntimeError("the SQLiteStore is closed")
        if self._conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            try:
                self._prepare(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _prepare(self, conn: sqlite3.Connection) -> None:
        mode = self._enable_wal(conn)
        if str(mode).lower() != "wal":
            # A file system without shared memory (some network mounts) refuses WAL; rollback mode still works.
            logger.warning("%s: SQLite refused WAL mode (got %r); readers will wait for writers", self.path, mode)
        # NORMAL is durable across a crash of this process in WAL mode; only a power cut may lose the last writes.
        conn.execute("PRAGMA synchronous = NORMAL")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise RuntimeError(
                f"{self.path}: cache schema version {version} is newer than this mcpcache reads ({SCHEMA_VERSION})"
            )
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]  # another process may have won the race
            if version == 1:
                # Version 1 rows have no checksum to verify their bodies by. The file is a cache, so the
                # migration drops every table (their indexes and triggers go with them) and starts empty,
                # inside this transaction: a crash leaves the version-1 file as it was.
                for table in _TABLES:
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
                version = 0
            if version == 0:
                for statement in _SCHEMA:
                    conn.execute(statement)
            # Future schema changes migrate from `version` here, in this same transaction.
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _enable_wal(self, conn: sqlite3.Connection) -> object:
        # Two processes opening a new file race to switch it to WAL; SQLite answers the loser SQLITE_BUSY at
        # once instead of calling the busy handler, so the wait is done here, within the same busy timeout.
        give_up = time.monotonic() + self.busy_timeout_s
        while True:
            try:
                return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() >= give_up:
                    raise
            time.sleep(0.01)

    def _close(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None:
                try:
                    if self._pending_touches:
                        self._try_flush_touches(self._conn)
                finally:
                    self._conn.close()
                    self._conn = None

    def _write(self, conn: sqlite3.Connection, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` in one write transaction, after applying queued touches and dropping expired items."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._flush_touches(conn)
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

    # -- operations, each run by one worker thread holding the lock -----------------------------------------

    def _load_many(self, conn: sqlite3.Connection, keys: list[str]) -> list[Item | None]:
        return [self._load(conn, key) for key in keys]

    def _load(self, conn: sqlite3.Connection, key: str) -> Item | None:
        row = conn.execute(_SELECT_ITEM, (self.namespace, key)).fetchone()
        if row is None:
            return None
        item, fault = _decode_row(row)
        if item is None or (item.expires_at is not None and item.expires_at <= self._clock()):
            if item is None:
                logger.warning("%s: dropping a corrupt record under key %r: %s", self.path, key, fault)
            self._drop_if_unusable(conn, key)
            return None
        self._pending_touches[key] = None
        self._pending_touches.move_to_end(key)
        while len(self._pending_touches) > _MAX_PENDING_TOUCHES:
            self._pending_touches.popitem(last=False)
        self._try_flush_touches(conn)
        return item

    def _save(self, conn: sqlite3.Connection, key: str, item: Item, meta: bytes, stamp: float, checksum: str) -> bool:
        # Inside `_write`'s transaction, after expired rows were deleted: a row found here is live.
        row = conn.execute("SELECT stamp FROM items WHERE ns = ? AND key = ?", (self.namespace, key)).fetchone()
        if row is not None and _is_later(row[0], stamp):
            return False
        self._delete_key(conn, key)
        size = len(meta) + len(item.body)
        if item.expires_at is not None and item.expires_at <= self._clock():
            return False
        if self.limits.max_bytes is not None and size > self.limits.max_bytes:
            return False
        self._make_room(conn, incoming_bytes=size, incoming_items=1)
        cursor = conn.execute(
            "INSERT INTO items (ns, key, grp, size, created_at, expires_at, accessed, meta, tag, stamp, checksum)"
            f" VALUES (:ns, :key, :grp, :size, :created_at, :expires_at, {_NEXT_TICK}, :meta, :tag, :stamp,"
            " :checksum)",
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
        if stamp is not None and _is_later(held_stamp, stamp):
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
            total = conn.execute("SELECT items, bytes FROM ns_usage WHERE ns = ?", (self.namespace,)).fetchone()
            expired = conn.execute(
                "SELECT count(*), COALESCE(SUM(size), 0) FROM items WHERE ns = ? AND expires_at <= ?",
                (self.namespace, now),
            ).fetchone()
        else:
            total = conn.execute(
                "SELECT items, bytes FROM group_usage WHERE ns = ? AND grp = ?", (self.namespace, group)
            ).fetchone()
            expired = conn.execute(
                "SELECT count(*), COALESCE(SUM(size), 0) FROM items WHERE ns = ? AND expires_at <= ? AND grp = ?",
                (self.namespace, now, group),
            ).fetchone()
        # Expired rows wait for the next write to be deleted (usage stays a read); they are not counted.
        items, held = (0, 0) if total is None else (int(total[0]), int(total[1]))
        return Usage(items=items - int(expired[0]), bytes=held - int(expired[1]))

    def _remove_all(self, conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM items WHERE ns = ?", (self.namespace,))
        self._pending_touches.clear()

    # -- LRU touches ---------------------------------------------------------------------------------------

    def _flush_touches(self, conn: sqlite3.Connection) -> None:
        """Apply queued uses, oldest first, inside the caller's write transaction."""
        while self._pending_touches:
            key, _ = self._pending_touches.popitem(last=False)
            conn.execute(
                f"UPDATE items SET accessed = {_NEXT_TICK} WHERE ns = :ns AND key = :key",
                {"ns": self.namespace, "key": key},
            )

    def _try_flush_touches(self, conn: sqlite3.Connection) -> None:
        # A touch only orders eviction: when the write lock is taken it waits for a later write, never the load.
        if not self._begin_without_waiting(conn):
            return
        try:
            self._flush_touches(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _drop_if_unusable(self, conn: sqlite3.Connection, key: str) -> None:
        """Delete the record under `key` if it is still corrupt or expired. The load that found it read
        outside any write transaction, so another connection may have replaced it since: the record is
        read again under the write lock and a sound replacement is left alone. Never waits for the lock."""
        if not self._begin_without_waiting(conn):
            return
        try:
            row = conn.execute(_SELECT_ITEM, (self.namespace, key)).fetchone()
            if row is not None:
                item, _ = _decode_row(row)
                if item is None or (item.expires_at is not None and item.expires_at <= self._clock()):
                    conn.execute("DELETE FROM items WHERE id = ?", (row[0],))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _begin_without_waiting(self, conn: sqlite3.Connection) -> bool:
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                return False
            raise
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        return True


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_later(held: object, stamp: float) -> bool:
    """Whether a stored stamp is strictly later than `stamp`; a stamp that is not a number (a corrupt row)
    orders before every stamp, so the row can be replaced."""
    return _is_number(held) and held > stamp


def _decode_row(row: tuple[object, ...]) -> tuple[Item | None, str]:
    """The item a `_SELECT_ITEM` row holds, or None and what is wrong with it: a column of the wrong type,
    metadata that is not a JSON object, or a body that does not match its checksum."""
    _, group, raw_meta, created_at, expires_at, tag, stamp, checksum, body = row
    if not isinstance(group, str) or not isinstance(raw_meta, bytes | str) or not isinstance(checksum, str):
        return None, "a column has the wrong type"
    if not isinstance(body, bytes):
        return None, "the body is missing or not a blob"
    if tag is not None and not isinstance(tag, str):
        return None, "the tag is not text"
    if not _is_number(created_at) or not _is_number(stamp):
        return None, "a time is not a number"
    if expires_at is not None and not _is_number(expires_at):
        return None, "the expiry is not a number"
    meta = decode_meta(raw_meta)
    if meta is None:
        return None, "the metadata is not a JSON object"
    if body_checksum(body) != checksum:
        return None, "the body does not match its checksum"
    expiry = None if expires_at is None else float(expires_at)
    return Item(meta, body, group, float(created_at), expiry, tag, float(stamp), checksum), ""


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
