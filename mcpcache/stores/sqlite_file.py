"""A SQLite store's file: its schema and migrations, how its rows read back, and what happens to a file
that is not a usable store.

Self-repair. A file that is not a usable store is moved aside and a new store created in its place, in the
same call: a file SQLite does not recognise (garbage, a wrong header: SQLITE_NOTADB), a damaged one
(SQLITE_CORRUPT, a short read: garbage pages, a file truncated under a live process), a SQLite database
holding other tables than ours (a foreign schema), our tables gone, or a directory at the path. It is
renamed beside the path with the time, `tools.db.corrupt-20261201T010203` (its `-wal` and `-shm` renamed
with it), kept, never deleted, and one warning says where it went (`move_aside`). A file that is merely
locked is never moved: busy is not corrupt. Before moving a file the store checks that the path still
names the file it opened, so a process that finds a corrupt file another process already replaced just
reopens the new one.

A newer schema (a `user_version` above `SCHEMA_VERSION`) belongs to a newer mcpcache, which may be using it
right now on the same machine: it is left alone (`NewerSchema`), and the store opens a file of its own
beside it, named for its schema version (`beside`: `tools.db` -> `tools.v2.db`). The two versions do not
share entries. `mcpcache.stores.sqlite` uses all of this; nothing here holds a connection of its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeGuard

from mcpcache.stores.items import Item, body_checksum, decode_meta

logger = logging.getLogger("mcpcache.stores.sqlite")


SCHEMA_VERSION = 3
"""Kept in `PRAGMA user_version`; an older file is migrated, a newer one left alone for its own version (this
store then uses a file beside it, see the module docstring). Version 2 added the tag, stamp and checksum
columns of `items`; version 3 the `server` and `tool` labels and the index listings walk (see `_prepare`)."""

CORRUPT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
SHORT_READ = 522  # SQLITE_IOERRSHORT_READ: the file ends before a page it points to (truncated)

LISTING_INDEX = "CREATE INDEX items_listing ON items (ns, grp, server, tool, key)"
"""What a listing walks, in its order: a page is an index range, whatever the store holds."""

SCHEMA = (
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
        server TEXT NOT NULL DEFAULT '',
        tool TEXT NOT NULL DEFAULT '',
        UNIQUE (ns, key)
    )""",
    "CREATE TABLE bodies (item_id INTEGER PRIMARY KEY, body BLOB NOT NULL)",
    "CREATE TABLE group_usage (ns TEXT NOT NULL, grp TEXT NOT NULL, items INTEGER NOT NULL, bytes INTEGER NOT NULL,"
    " PRIMARY KEY (ns, grp))",
    "CREATE TABLE ns_usage (ns TEXT PRIMARY KEY, items INTEGER NOT NULL, bytes INTEGER NOT NULL)",
    "CREATE INDEX items_lru ON items (ns, accessed)",
    "CREATE INDEX items_group_lru ON items (ns, grp, accessed)",
    "CREATE INDEX items_expiry ON items (ns, expires_at) WHERE expires_at IS NOT NULL",
    LISTING_INDEX,
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

TABLES = ("items", "bodies", "group_usage", "ns_usage")
"""Every table of the schema; dropping them drops their indexes and triggers too."""


class NotAStore(Exception):
    """The file at the path is not a usable store (the reason is the message)."""


class NewerSchema(Exception):
    """The file belongs to a newer mcpcache."""


def move_aside(path: Path, reason: str, identity: tuple[int, int] | None) -> None:
    """Rename the file (and its -wal and -shm) beside it, unless the path no longer names that file."""
    if identity is not None and file_identity(path) != identity:
        return  # another process replaced it already: the new file is opened as it is
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists() or aside.with_name(aside.name + "-wal").exists():
        n += 1
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    for extra in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.rename(path.with_name(path.name + extra), aside.with_name(aside.name + extra))
    logger.warning(
        "%s is not a usable mcpcache store (%s): moved it aside to %s and started a new store. Nothing "
        "reads the old file any more; delete it when you no longer need it.",
        path,
        reason,
        aside,
    )


def prepare(conn: sqlite3.Connection, path: Path, *, busy_timeout_s: float, journal_size_limit: int) -> None:
    """Make the file behind `conn` this version's store: WAL, the schema created or migrated. Raises
    `NewerSchema` for a newer mcpcache's file and `NotAStore` for a file that is not a store (both left
    untouched)."""
    # What the file is, before anything is written to it: a newer version's or another program's file
    # is not touched (not even switched to WAL).
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    version = conn.execute("PRAGMA user_version").fetchall()[0][0]
    if version > SCHEMA_VERSION:
        raise NewerSchema(f"cache schema version {version} is newer than this mcpcache reads ({SCHEMA_VERSION})")
    check_tables(conn, version)
    mode = _enable_wal(conn, busy_timeout_s)
    if str(mode).lower() != "wal":
        # A file system without shared memory (some network mounts) refuses WAL; rollback mode still works.
        logger.warning("%s: SQLite refused WAL mode (got %r); readers will wait for writers", path, mode)
    # NORMAL is durable across a crash of this process in WAL mode; only a power cut may lose the last writes.
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(f"PRAGMA journal_size_limit = {journal_size_limit}")
    if version == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchall()[0][0]  # another process may have won the race
        if version > SCHEMA_VERSION:
            raise NewerSchema(f"cache schema version {version} is newer than this mcpcache reads ({SCHEMA_VERSION})")
        check_tables(conn, version)
        if version == 1:
            # Version 1 rows have no checksum to verify their bodies by. The file is a cache, so the
            # migration drops every table (their indexes and triggers go with them) and starts empty,
            # inside this transaction: a crash leaves the version-1 file as it was.
            for table in TABLES:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
            version = 0
        if version == 0:
            for statement in SCHEMA:
                conn.execute(statement)
        elif version == 2:
            migrate_2_to_3(conn)
        # Future schema changes migrate from `version` here, in this same transaction.
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _enable_wal(conn: sqlite3.Connection, busy_timeout_s: float) -> object:
    # Two processes opening a new file race to switch it to WAL; SQLite answers the loser SQLITE_BUSY at
    # once instead of calling the busy handler, so the wait is done here, within the same busy timeout.
    give_up = time.monotonic() + busy_timeout_s
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchall()[0][0]
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= give_up:
                raise
        time.sleep(0.01)


def is_not_a_store(exc: BaseException) -> bool:
    """Whether an error says the file is not a usable store (damaged, not SQLite, our tables gone), as
    opposed to busy, full or unreadable for a reason that moving the file would not fix."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and (code & 0xFF in CORRUPT_CODES or code == SHORT_READ):
        return True
    if isinstance(exc, NotAStore):
        return True
    message = str(exc)
    return message.startswith(("no such table", "no such column", "file is not a database")) or ("malformed" in message)


def migrate_2_to_3(conn: sqlite3.Connection) -> None:
    """Add the labels and the listing index, keeping every entry (inside the caller's transaction).

    Adding a column with a constant default rewrites no row. Entries the tool cache wrote at version 2 name
    their tool in their metadata, so that label is filled from it (a row update: bodies live in their own
    table and are not touched); their server was never recorded and stays "" (listed as unknown). A version-2
    process still running on the file keeps working: it names its columns, and its new rows get "" labels.
    """
    conn.execute("ALTER TABLE items ADD COLUMN server TEXT NOT NULL DEFAULT ''")
    conn.execute("ALTER TABLE items ADD COLUMN tool TEXT NOT NULL DEFAULT ''")
    conn.execute(
        "UPDATE items SET tool = json_extract(CAST(meta AS TEXT), '$.tool')"
        " WHERE grp = 'tools' AND json_valid(CAST(meta AS TEXT))"
        " AND json_type(CAST(meta AS TEXT), '$.tool') = 'text'"
    )
    conn.execute(LISTING_INDEX)


def check_tables(conn: sqlite3.Connection, version: int) -> None:
    """Raise `NotAStore` unless the file's tables are what `version` of our schema has (0: none at all)."""
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
    names = {name for name in names if not name.startswith("sqlite_")}
    if version == 0 and names:
        raise NotAStore(f"a SQLite database of another schema (tables {', '.join(sorted(names)[:5])})")
    if version > 0 and not set(TABLES) <= names:
        raise NotAStore(f"schema version {version} without its tables")


def create_private(path: Path) -> None:
    """Create the database file readable by its owner only, before SQLite creates it with the umask's mode;
    SQLite gives its -wal and -shm files the database's mode. An existing file is left as it is."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def path_beside(path: Path) -> Path:
    """The file this schema version uses beside a file of a newer one: tools.db -> tools.v2.db."""
    if path.suffix:
        return path.with_name(f"{path.stem}.v{SCHEMA_VERSION}{path.suffix}")
    return path.with_name(f"{path.name}.v{SCHEMA_VERSION}")


def is_busy(exc: sqlite3.DatabaseError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


# The rows ---------------------------------------------------------------------------------------------

ROW = "i.id, i.grp, i.meta, i.created_at, i.expires_at, i.tag, i.stamp, i.checksum, i.server, i.tool"
"""The item row's columns every read selects, in `decode_row`'s order (the body, or what stands for it, last)."""

SELECT_ITEM = (
    f"SELECT {ROW}, b.body FROM items AS i LEFT JOIN bodies AS b ON b.item_id = i.id WHERE i.ns = ? AND i.key = ?"
)

HEAD_ITEM = (
    f"SELECT {ROW}, typeof(b.body)"
    " FROM items AS i LEFT JOIN bodies AS b ON b.item_id = i.id WHERE i.ns = ? AND i.key = ?"
)
"""The item row and the type of its body, which SQLite answers without reading the body's pages; the body
itself is then read with incremental blob I/O straight into one bytes object. Selected as a column, a
20 MB body was copied twice (into a buffer of SQLite's, then into the bytes), each copy into newly
mapped memory, and took 10-20x longer than a 10 MB one."""

PEEK_ITEM = f"SELECT {ROW}, X'' FROM items AS i WHERE i.ns = ? AND i.key = ?"
"""`SELECT_ITEM` without the body (an empty blob in its place): the bodies table is never read."""


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_later(held: object, stamp: float) -> bool:
    """Whether a stored stamp is strictly later than `stamp`; a stamp that is not a number (a corrupt row)
    orders before every stamp, so the row can be replaced."""
    return is_number(held) and held > stamp


def decode_row(row: tuple[object, ...], *, verify: bool = True) -> tuple[Item | None, str]:
    """The item a `SELECT_ITEM` row holds, or None and what is wrong with it: a column of the wrong type,
    metadata that is not a JSON object, or a body that does not match its checksum."""
    _, group, raw_meta, created_at, expires_at, tag, stamp, checksum, server, tool, body = row
    if not isinstance(group, str) or not isinstance(raw_meta, bytes | str) or not isinstance(checksum, str):
        return None, "a column has the wrong type"
    if not isinstance(server, str) or not isinstance(tool, str):
        return None, "a label is not text"
    if not isinstance(body, bytes):
        return None, "the body is missing or not a blob"
    if tag is not None and not isinstance(tag, str):
        return None, "the tag is not text"
    if not is_number(created_at) or not is_number(stamp):
        return None, "a time is not a number"
    if expires_at is not None and not is_number(expires_at):
        return None, "the expiry is not a number"
    meta = decode_meta(raw_meta)
    if meta is None:
        return None, "the metadata is not a JSON object"
    if verify and body_checksum(body) != checksum:
        return None, "the body does not match its checksum"
    expiry = None if expires_at is None else float(expires_at)
    return Item(meta, body, group, float(created_at), expiry, tag, float(stamp), checksum, server, tool), ""
