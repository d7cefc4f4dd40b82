"""Walking a SQLite store: the SQL behind `SQLiteStore.list_page`, `count` and `remove_matching`, which
`mcpcache cache ls | stats | clear` use, over the `items` table of `mcpcache.stores.sqlite_file`.

Each function runs on the connection it is handed, inside whatever transaction the store opened for it (a
read connection for a page or a count, the writer's transaction for a removal), and judges expiry by the
`now` it is given. A page is one indexed range (`LISTING_INDEX`: namespace, group, server, tool, key), read
without any body and never counted as a use.
"""

from __future__ import annotations

import sqlite3

from mcpcache.stores.items import Listed, Match, Page, Usage, position_cursor
from mcpcache.stores.sqlite_file import ROW, decode_row

__all__ = ["count", "list_page", "remove_matching"]


def _matching(namespace: str, now: float, match: Match) -> tuple[str, list[object]]:
    """The WHERE clause (over `items AS i`) of the live items `match` covers, and its parameters."""
    where = "i.ns = ? AND i.grp = ? AND (i.expires_at IS NULL OR i.expires_at > ?)"
    params: list[object] = [namespace, match.group, now]
    if match.server is not None:
        where += " AND i.server = ?"
        params.append(match.server)
    if match.tool is not None:
        where += " AND i.tool = ?"
        params.append(match.tool)
    return where, params


def list_page(
    conn: sqlite3.Connection,
    namespace: str,
    now: float,
    match: Match,
    after: tuple[str, str, str] | None,
    limit: int,
) -> Page:
    """Up to `limit` live items `match` covers, after the position `after` (server, tool, key)."""
    where, params = _matching(namespace, now, match)
    if after is not None:
        # Compared on the columns the match leaves open, so that the index seeks to the position.
        columns, values = ["i.server", "i.tool", "i.key"], list(after)
        if match.server is not None:
            del columns[0], values[0]
            if match.tool is not None:
                del columns[0], values[0]
        elif match.tool is not None:
            del columns[1], values[1]
        where += f" AND ({', '.join(columns)}) > ({', '.join('?' * len(columns))})"
        params.extend(values)
    # One more row than asked for says whether another page follows. fetchall: a statement left open
    # keeps its read transaction, which pins the log.
    rows = conn.execute(
        f"SELECT {ROW}, X'', i.key, i.size FROM items AS i WHERE {where} ORDER BY i.server, i.tool, i.key LIMIT ?",
        (*params, limit + 1),
    ).fetchall()
    entries: list[Listed] = []
    for row in rows[:limit]:
        item, _ = decode_row(row[:-2], verify=False)
        if item is not None:  # a corrupt record is skipped; the next load deletes it
            entries.append(Listed(str(row[-2]), item, int(row[-1])))
    if len(rows) <= limit:
        return Page(tuple(entries), None)
    last = rows[limit - 1]
    return Page(tuple(entries), position_cursor(str(last[8]), str(last[9]), str(last[-2])))


def count(conn: sqlite3.Connection, namespace: str, now: float, match: Match) -> Usage:
    """Items and bytes `match` covers, summed by SQLite."""
    where, params = _matching(namespace, now, match)
    rows = conn.execute(f"SELECT count(*), COALESCE(SUM(i.size), 0) FROM items AS i WHERE {where}", params)
    items, held = rows.fetchall()[0]
    return Usage(items=int(items), bytes=int(held))


def remove_matching(conn: sqlite3.Connection, namespace: str, now: float, match: Match, batch: int) -> int:
    """Remove up to `batch` of the items `match` covers (inside the store's write transaction, after expired
    rows were deleted); returns how many."""
    where, params = _matching(namespace, now, match)
    sql = f"DELETE FROM items WHERE id IN (SELECT i.id FROM items AS i WHERE {where} LIMIT ?)"
    return conn.execute(sql, (*params, batch)).rowcount
