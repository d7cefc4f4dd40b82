"""Cache files as earlier releases left them, for the migration tests (the store's and `mcpcache cache`'s)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mcpcache.stores.items import body_checksum

SCHEMA_V1 = """
CREATE TABLE items (
    id INTEGER PRIMARY KEY, ns TEXT NOT NULL, key TEXT NOT NULL, grp TEXT NOT NULL, size INTEGER NOT NULL,
    created_at REAL NOT NULL, expires_at REAL, accessed INTEGER NOT NULL, meta BLOB NOT NULL, UNIQUE (ns, key)
);
CREATE TABLE bodies (item_id INTEGER PRIMARY KEY, body BLOB NOT NULL);
CREATE TABLE group_usage (ns TEXT NOT NULL, grp TEXT NOT NULL, items INTEGER NOT NULL, bytes INTEGER NOT NULL,
    PRIMARY KEY (ns, grp));
CREATE TABLE ns_usage (ns TEXT PRIMARY KEY, items INTEGER NOT NULL, bytes INTEGER NOT NULL);
CREATE INDEX items_lru ON items (ns, accessed);
CREATE INDEX items_group_lru ON items (ns, grp, accessed);
CREATE INDEX items_expiry ON items (ns, expires_at) WHERE expires_at IS NOT NULL;
CREATE TRIGGER items_counted AFTER INSERT ON items BEGIN
    INSERT INTO group_usage (ns, grp, items, bytes) VALUES (new.ns, new.grp, 1, new.size)
        ON CONFLICT (ns, grp) DO UPDATE SET items = items + 1, bytes = bytes + excluded.bytes;
    INSERT INTO ns_usage (ns, items, bytes) VALUES (new.ns, 1, new.size)
        ON CONFLICT (ns) DO UPDATE SET items = items + 1, bytes = bytes + excluded.bytes;
END;
CREATE TRIGGER items_uncounted AFTER DELETE ON items BEGIN
    DELETE FROM bodies WHERE item_id = old.id;
    UPDATE group_usage SET items = items - 1, bytes = bytes - old.size WHERE ns = old.ns AND grp = old.grp;
    DELETE FROM group_usage WHERE ns = old.ns AND grp = old.grp AND items <= 0;
    UPDATE ns_usage SET items = items - 1, bytes = bytes - old.size WHERE ns = old.ns;
END;
"""
"""The tables of a version-1 cache file, as the previous release created them."""


def write_v1_file(path: Path) -> None:
    """A version-1 cache file in WAL mode holding one item, as the previous release would leave it."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(SCHEMA_V1)
        conn.execute(
            "INSERT INTO items (ns, key, grp, size, created_at, expires_at, accessed, meta)"
            " VALUES ('mcpcache', 'old', 'g', 10, 1.0, NULL, 1, CAST('{}' AS BLOB))"
        )
        conn.execute("INSERT INTO bodies (item_id, body) VALUES (last_insert_rowid(), x'0102030405060708')")
        conn.execute("PRAGMA user_version = 1")
    finally:
        conn.close()


SCHEMA_V2 = (
    SCHEMA_V1.replace(
        "meta BLOB NOT NULL, UNIQUE (ns, key)",
        "meta BLOB NOT NULL, tag TEXT, stamp REAL NOT NULL, checksum TEXT NOT NULL, UNIQUE (ns, key)",
    )
    + """
CREATE TRIGGER items_recounted AFTER UPDATE OF ns, grp, size ON items BEGIN
    UPDATE group_usage SET items = items - 1, bytes = bytes - old.size WHERE ns = old.ns AND grp = old.grp;
    DELETE FROM group_usage WHERE ns = old.ns AND grp = old.grp AND items <= 0;
    UPDATE ns_usage SET items = items - 1, bytes = bytes - old.size WHERE ns = old.ns;
    INSERT INTO group_usage (ns, grp, items, bytes) VALUES (new.ns, new.grp, 1, new.size)
        ON CONFLICT (ns, grp) DO UPDATE SET items = items + 1, bytes = bytes + excluded.bytes;
    INSERT INTO ns_usage (ns, items, bytes) VALUES (new.ns, 1, new.size)
        ON CONFLICT (ns) DO UPDATE SET items = items + 1, bytes = bytes + excluded.bytes;
END;
"""
)
"""The tables of a version-2 cache file, as the previous release created them."""

V2_INSERT = (
    "INSERT INTO items (ns, key, grp, size, created_at, expires_at, accessed, meta, tag, stamp, checksum)"
    " VALUES ('mcpcache', ?, ?, ?, 1.0, NULL, ?, ?, ?, 2.0, ?)"
)
"""How the previous release saved an item (its bodies go in `bodies` under the row's id)."""

V2_ITEMS = [
    # (key, group, meta, body, tag): a tool answer as the previous tool cache kept it, a reference, a mark.
    (
        "t:answer",
        "tools",
        b'{"tool":"read_notebook","scope":"private","ttlMs":5000,"etag":"W/\\"1\\"","requestedAt":1.0,'
        b'"receivedAt":1.5,"size":14}',
        b'{"content":[]}',
        'W/"1"',
    ),
    ("r:payload", "ref:conv-1", b'{"uri":"mcp+cache://x"}', b"reference payload", None),
    ("m:mark", "marks", b'{"endedAt":1.5}', b"", None),
]


def write_v2_file(path: Path) -> None:
    """A version-2 cache file in WAL mode holding a tool answer, a reference and a mark."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(SCHEMA_V2)
        for tick, (key, group, meta, body, tag) in enumerate(V2_ITEMS, 1):
            size = len(meta) + len(body)
            conn.execute(V2_INSERT, (key, group, size, tick, meta, tag, body_checksum(body)))
            conn.execute("INSERT INTO bodies (item_id, body) VALUES (last_insert_rowid(), ?)", (body,))
        conn.execute("PRAGMA user_version = 2")
    finally:
        conn.close()
