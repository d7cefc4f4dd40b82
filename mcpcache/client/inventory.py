"""What the tool cache holds, as a person reads it: the data behind `ToolCache.entries()` and `mcpcache cache`.

Every entry carries its server, tool and abbreviated arguments in the store (labels and metadata, see
`mcpcache.stores.base`), so a listing never reads an answer's body, and a store of any size is walked one
page at a time. Freshness is judged as the cache judges it (`mcpcache.client.policy.decide_lookup`): by the
entry's ttl and by the freshness marks a mutation, a change notification or an invalidation left in the
store. What only a running process knows (its own marks when the store could not record them, a `clear()`)
is not seen here.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from mcpcache.client.entries import TOOLS_GROUP
from mcpcache.client.policy import EntryMeta, ServeFresh, decide_lookup, freshness_ended_at, readable_duration
from mcpcache.stores.base import Store
from mcpcache.stores.items import DEFAULT_PAGE_SIZE, Item, Listed, Match
from mcpcache.stores.sqlite_file import SCHEMA_VERSION

__all__ = [
    "CachedEntry",
    "Summary",
    "ToolTally",
    "cache_file_problem",
    "cached_entries",
    "describe_freshness",
    "summarize",
]


@dataclass(frozen=True)
class CachedEntry:
    """One stored answer, as `mcpcache cache ls` shows it."""

    key: str
    server: str
    """The server's readable label ("" for an entry an earlier version stored, which did not record it)."""
    tool: str
    arguments: str
    """The call's arguments as canonical JSON, abbreviated."""
    size: int
    """Bytes the entry takes in the store (the answer and its metadata)."""
    stored_at: float
    """When the answer (or its last revalidation) arrived, on the cache's clock."""
    ttl_ms: int
    etag: str | None
    scope: str
    fresh: bool
    """Whether a call now would be served this answer without asking the server."""
    freshness: str
    """Why, in a few words: "fresh, 4.2 s left", "stale: expired 3.0 min ago", "stale: invalidated 2.0 s ago"
    (by a mutating call, a change notification or `invalidate`)."""
    era: str = ""
    """The protocol version the answer came in ("2026-07-28", "2025-11-25"; "" when not recorded): one call
    is kept once per version, as each version's answers differ (docs/client.md, "Keys")."""
    stale_while_revalidate_ms: int = 0
    """How long after freshness ends the answer may be served at once while it is revalidated (0: not)."""
    stale_if_error_ms: int = 0
    """How long after freshness ends the answer may be served when the server cannot answer (0: not)."""


def describe_freshness(entry: EntryMeta, now: float, ended_at: float | None) -> tuple[bool, str]:
    """Whether the cache would serve `entry` now without asking, and why, in a few words."""
    if isinstance(decide_lookup("use", entry, now, ended_at), ServeFresh):
        return True, f"fresh, {readable_duration(entry.fresh_until() - now)} left"
    if ended_at is not None and ended_at >= entry.requested_at:
        return False, f"stale: invalidated {readable_duration(now - ended_at)} ago"
    if entry.ttl_ms == 0:
        return False, "stale: ttl 0, checked on every call"
    return False, f"stale: expired {readable_duration(now - entry.fresh_until())} ago"


async def cached_entries(
    store: Store,
    *,
    server: str | None = None,
    tool: str | None = None,
    clock: Callable[[], float] = time.time,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> AsyncIterator[CachedEntry]:
    """The tool answers `store` holds (of one server label and one tool, when given), a page at a time.

    Each page costs one listing and one read of the marks its entries name; records the cache would not
    serve (not of its shape) are left out, as the cache leaves them."""
    match = Match(TOOLS_GROUP, server, tool)
    cursor: str | None = None
    while True:
        page = await store.list_page(match, cursor, page_size)
        described = [(listed, EntryMeta.from_json(listed.item.meta)) for listed in page.entries]
        names = sorted({mark for _, entry in described if entry is not None for mark in entry.marks})
        marks = dict(zip(names, await store.peek_many(names), strict=True)) if names else {}
        now = clock()
        for listed, entry in described:
            if entry is not None:
                yield _described(listed, entry, now, [marks.get(name) for name in entry.marks])
        if page.cursor is None:
            return
        cursor = page.cursor


def _described(listed: Listed, entry: EntryMeta, now: float, marks: list[Item | None]) -> CachedEntry:
    ended_at = freshness_ended_at(None, *(mark.meta.get("endedAt") for mark in marks if mark is not None))
    fresh, freshness = describe_freshness(entry, now, ended_at)
    return CachedEntry(
        key=listed.key,
        server=listed.item.server,
        tool=entry.tool,
        arguments=entry.arguments,
        size=listed.size,
        stored_at=entry.received_at,
        ttl_ms=entry.ttl_ms,
        etag=entry.etag,
        scope=entry.scope,
        fresh=fresh,
        freshness=freshness,
        era=entry.era,
        stale_while_revalidate_ms=entry.stale_while_revalidate_ms,
        stale_if_error_ms=entry.stale_if_error_ms,
    )


@dataclass
class ToolTally:
    """What is cached for one tool of one server."""

    server: str
    tool: str
    entries: int = 0
    fresh: int = 0
    bytes: int = 0


@dataclass
class Summary:
    """Totals of what is cached (`mcpcache cache stats`)."""

    entries: int = 0
    fresh: int = 0
    bytes: int = 0
    by_tool: dict[tuple[str, str], ToolTally] = field(default_factory=dict)
    oldest: float | None = None
    newest: float | None = None

    def add(self, entry: CachedEntry) -> None:
        self.entries += 1
        self.fresh += entry.fresh
        self.bytes += entry.size
        self.oldest = entry.stored_at if self.oldest is None else min(self.oldest, entry.stored_at)
        self.newest = entry.stored_at if self.newest is None else max(self.newest, entry.stored_at)
        tally = self.by_tool.get((entry.server, entry.tool))
        if tally is None:
            tally = self.by_tool[(entry.server, entry.tool)] = ToolTally(entry.server, entry.tool)
        tally.entries += 1
        tally.fresh += entry.fresh
        tally.bytes += entry.size


async def summarize(
    store: Store, *, server: str | None = None, tool: str | None = None, clock: Callable[[], float] = time.time
) -> Summary:
    """Totals over every entry (of one server label and one tool, when given), walked a page at a time."""
    summary = Summary()
    async for entry in cached_entries(store, server=server, tool=tool, clock=clock):
        summary.add(entry)
    return summary


SQLITE_MAGIC = b"SQLite format 3\x00"

_WHAT_TO_DO = (
    "it holds only cached answers: delete it or move it aside (ToolCache() moves a damaged file aside by itself "
    "and starts a new one)"
)


def cache_file_problem(path: Path) -> str | None:
    """Why `path` is not a cache file this version can read (None: it is one), in one line that says what
    to do, found without changing anything: no file is created beside it and nothing is moved.

    A tool that only looks (`mcpcache cache`) must never let `SQLiteStore` take a mistyped path for a damaged
    store, which it would move aside and replace. The whole file is checked (`PRAGMA quick_check`, about a
    quarter of a second per 500 MB): a damaged page anywhere would make the store move the file aside at the
    first read that meets it."""
    if not path.exists():
        return f"no cache file at {path}"
    if path.is_dir():
        return f"{path} is a folder, not a cache file"
    try:
        with path.open("rb") as file:
            head = file.read(len(SQLITE_MAGIC))
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    if head != SQLITE_MAGIC:
        return f"{path} is not an mcpcache cache file (not a SQLite database): check the path"
    # Read-only, and without the -wal and -shm files SQLite would otherwise create beside a file in WAL
    # mode: `immutable` when there are none (no process is writing it), a plain read-only open when a
    # process left them (its log may hold the latest writes).
    wal = path.with_name(path.name + "-wal")
    uri = path.resolve().as_uri() + ("?mode=ro" if wal.exists() else "?mode=ro&immutable=1")
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            version = conn.execute("PRAGMA user_version").fetchall()[0][0]
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            damage = conn.execute("PRAGMA quick_check(1)").fetchall()[0][0]
    except sqlite3.DatabaseError as exc:
        return f"{path} is a damaged cache file ({exc}); {_WHAT_TO_DO}"
    if damage != "ok":
        return f"{path} is a damaged cache file ({' '.join(str(damage).split())}); {_WHAT_TO_DO}"
    if version > SCHEMA_VERSION:
        return f"{path} belongs to a newer mcpcache (cache schema {version}); use that version to look at it"
    if "items" not in tables:
        return f"{path} is not an mcpcache cache file (a SQLite database of something else): check the path"
    return None
