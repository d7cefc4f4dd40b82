"""What `SQLiteStore.peek_now` answers from: the items its last peeks found, kept while the file has not
changed since those peeks began.

"Not changed" is SQLite's `PRAGMA data_version`, read on a connection of this object's own: its value
changes whenever any other connection commits to the file, the store's own writer and every connection of
another process included (a checkpoint changes it too, which costs only a peek). Reading it takes a couple
of microseconds of shared memory and never waits for a lock (`busy_timeout = 0`: a failure sends the caller
to `peek_many`). The items are kept under the version read *before* the peek that found them began, and
answered only while the version is still that one: then nothing was committed between that read and now,
so what the peek read is what the file holds.

A version is tagged with the epoch of the connection it was read on, so versions read on a connection
opened later (after the file was repaired, say) are never compared with older ones.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mcpcache.stores.items import Item

__all__ = ["KeptPeeks", "Version"]

Version = tuple[int, int]
"""(epoch of the watching connection, `data_version` read on it)."""

_NOT_KEPT: Any = object()

MOST_KEPT = 4096
"""Items kept at most (emptied when full, and whenever the file changes)."""


class KeptPeeks:
    """Peeks of one store, kept while SQLite's `data_version` is unchanged. `connect` opens a connection to
    a file; `ensure` is called from a worker thread (it may open one), the rest from anywhere, never
    waiting: the lock guards a few assignments and one pragma."""

    def __init__(self, connect: Callable[[Path], sqlite3.Connection]) -> None:
        self._connect = connect
        self._lock = threading.Lock()
        self._watch: tuple[sqlite3.Connection, int, int] | None = None
        """The watching connection, its epoch, and the store's generation (which file) it was opened in."""
        self._epochs = itertools.count()
        self._version: Version | None = None
        """The version the last `answer` read."""
        self._kept: dict[str, Item | None] = {}
        self._closed = False

    def version(self) -> Version | None:
        """The version to keep a peek's items under: read it before the peek begins."""
        return self._version

    def keep(self, version: Version, keys: Sequence[str], items: Sequence[Item | None]) -> None:
        """What a peek that began after `version` was read found, kept if the version is still current."""
        with self._lock:
            if version != self._version:
                return
            if len(self._kept) + len(items) > MOST_KEPT:
                self._kept.clear()
            self._kept.update(zip(keys, items, strict=True))

    def answer(self, keys: Sequence[str], generation: int, now: float) -> list[Item | None] | None:
        """The kept items for `keys` if the file is unchanged since they were peeked (and none has expired
        by `now`); None otherwise (then the version just read is the one the next peek is kept under)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            watch = self._watch
            if watch is None or watch[2] != generation:
                return None  # not opened yet, or the store moved to another file: `ensure` opens one
            conn, epoch, _ = watch
            try:
                version = (epoch, conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error:
                return None
            if version != self._version:
                self._version = version
                self._kept = {}
                return None
            kept = self._kept
        finally:
            self._lock.release()
        items: list[Item | None] = []
        for key in keys:
            item = kept.get(key, _NOT_KEPT)
            if item is _NOT_KEPT or (item is not None and item.expires_at is not None and item.expires_at <= now):
                return None
            items.append(item)
        return items

    def ensure(self, active: Path | None, generation: int) -> None:
        """Open the watching connection on `active` (the store's file in `generation`) unless one is open on
        it; from a worker thread, since opening a file is not for an event loop's thread."""
        watch = self._watch
        if active is None or (watch is not None and watch[2] == generation):
            return
        conn = self._connect(active)
        try:
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA query_only = 1")
        except sqlite3.Error:
            conn.close()
            return
        old = None
        with self._lock:
            kept = not self._closed
            if kept:
                old, self._watch = self._watch, (conn, next(self._epochs), generation)
                self._version = None
                self._kept = {}
        if not kept:
            conn.close()
        if old is not None:
            old[0].close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            watch, self._watch = self._watch, None
            self._version, self._kept = None, {}
        if watch is not None:
            watch[0].close()
