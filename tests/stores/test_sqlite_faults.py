"""The SQLite store against real faults: a lock or a read transaction held by another OS process, files
that are not a store any more, a write-ahead log pinned by a reader, and the files' permissions.

Every test asserts behaviour (what was served, what raised, what is on disk), never speed; where a bound
on time appears it is many times what the behaviour needs, only to keep a broken store from hanging.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import stat
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from support.sqlite_lock import Hold

from mcpcache.stores import Item, SQLiteBusyError, SQLiteStore, StoreLimits, opening
from mcpcache.stores.sqlite import SCHEMA_VERSION, SQLiteWalFullError

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


def aside_files(path: Path) -> list[Path]:
    """The files a repair moved aside from `path`, named `<name>.corrupt-<UTC time>` (the -wal/-shm excluded)."""
    pattern = re.compile(re.escape(path.name) + r"\.corrupt-\d{8}T\d{6}(-\d+)?$")
    return sorted(p for p in path.parent.iterdir() if pattern.match(p.name))


def store_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("mcpcache") and r.levelno >= logging.WARNING]


async def filled(path: Path, n: int = 40, size: int = 4000) -> None:
    async with SQLiteStore(path, StoreLimits()) as store:
        for i in range(n):
            assert await store.save(f"k{i}", Item({"i": i}, bytes([i % 251]) * size, "g"))


# -- locks held elsewhere --------------------------------------------------------------------------------


async def test_loads_do_not_queue_behind_writes_waiting_for_a_lock(tmp_path: Path, hold: Hold) -> None:
    path = tmp_path / "c.db"
    async with SQLiteStore(path, StoreLimits(), busy_timeout_s=3.0) as store:
        stored = Item({}, b"stored", "g")
        await store.save("k", stored)
        holder = hold(path, "exclusive")
        finished: list[str] = []

        async def save(i: int) -> None:
            with pytest.raises(SQLiteBusyError):
                await store.save(f"new{i}", Item({}, b"new", "g"))
            finished.append("save")

        async def load() -> None:
            await anyio.sleep(0.2)  # the saves are waiting for the lock by now
            assert await store.load("k") == stored
            assert await store.load_many(["k", "missing"]) == [stored, None]
            finished.append("load")

        async with anyio.create_task_group() as tasks:
            for i in range(4):
                tasks.start_soon(save, i)
            tasks.start_soon(load)
        holder.release()
        # Behaviour: the load was answered while four saves of this process still waited for the lock.
        assert finished[0] == "load", finished
        assert await store.save("after", Item({}, b"after", "g"))
        assert await store.load("after") == Item({}, b"after", "g")


@pytest.mark.parametrize("mode", ["exclusive", "immediate"])
async def test_a_write_lock_held_elsewhere_is_a_quick_busy_error_not_a_stall(
    tmp_path: Path, hold: Hold, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "c.db"
    async with SQLiteStore(path) as store:  # the default wait
        await store.save("k", Item({}, b"body", "g"))
        holder = hold(path, mode)
        started = time.monotonic()
        with pytest.raises(SQLiteBusyError, match=r"c\.db.*0\.25 s \(busy_timeout_s\)"):
            await store.save("new", Item({}, b"new", "g"))
        assert time.monotonic() - started < 5  # gave up rather than stalled (generous: behaviour, not speed)
        assert await store.load("k") == Item({}, b"body", "g")
        holder.release()
        assert await store.save("new", Item({}, b"new", "g"))
    assert aside_files(path) == []  # busy is not corrupt
    assert store_warnings(caplog) == []


async def test_a_deadline_abandons_a_write_waiting_for_the_lock(tmp_path: Path, hold: Hold) -> None:
    path = tmp_path / "c.db"
    async with SQLiteStore(path, StoreLimits(), busy_timeout_s=3.0) as store:
        await store.save("k", Item({}, b"body", "g"))
        holder = hold(path, "exclusive")
        started = time.monotonic()
        with anyio.move_on_after(0.2) as scope:
            await store.save("new", Item({}, b"new", "g"))
        assert scope.cancelled_caught
        assert time.monotonic() - started < 2.5  # returned at the deadline, not after the 3 s wait
        # The abandoned save still holds the writer connection in its thread; loads do not need it.
        assert await store.load("k") == Item({}, b"body", "g")
        holder.release()
        await anyio.sleep(0.1)
        assert await store.save("after", Item({}, b"after", "g"))
        assert await store.load("after") == Item({}, b"after", "g")
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM items WHERE created_at < 0").fetchone()[0] == 0


# -- files that are not a store --------------------------------------------------------------------------


def garbage_pages(path: Path) -> None:
    data = bytearray(path.read_bytes())
    page = 4096
    for offset in range(page, len(data), page):  # the header page stays; every other page is noise
        data[offset : offset + page] = os.urandom(min(page, len(data) - offset))
    path.write_bytes(bytes(data))


def garbage_header(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(os.urandom(100) + data[100:])


def foreign_schema(path: Path) -> None:
    path.unlink()
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
        conn.execute("INSERT INTO notes (text) VALUES ('someone else''s data')")
    conn.close()


def not_sqlite(path: Path) -> None:
    path.write_bytes(b"this is a text file, not a database\n" * 200)


BAD_FILES: dict[str, Callable[[Path], None]] = {
    "garbage pages": garbage_pages,
    "garbage header": garbage_header,
    "foreign schema": foreign_schema,
    "not SQLite at all": not_sqlite,
}


@pytest.mark.parametrize("case", list(BAD_FILES))
async def test_a_file_that_is_not_a_store_is_moved_aside_and_replaced(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tools.db"
    await filled(path)
    BAD_FILES[case](path)
    bad = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="mcpcache"):
        async with SQLiteStore(path) as store:
            assert await store.load("k1") is None  # the first call already works
            assert await store.save("k1", Item({}, b"fresh", "g"))
            assert await store.load("k1") == Item({}, b"fresh", "g")
        async with SQLiteStore(path) as reopened:  # and it stays repaired for the next process
            assert await reopened.load("k1") == Item({}, b"fresh", "g")
    (aside,) = aside_files(path)
    assert aside.read_bytes() == bad  # kept as it was, never deleted
    warnings = store_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert str(aside) in warnings[0]
    assert "delete it when you no longer need it" in warnings[0]


async def test_a_directory_at_the_path_is_moved_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "tools.db"
    path.mkdir()
    (path / "inside.txt").write_text("kept")
    with caplog.at_level(logging.WARNING, logger="mcpcache"):
        async with SQLiteStore(path) as store:
            assert await store.save("k", Item({}, b"body"))
            assert await store.load("k") == Item({}, b"body")
    (aside,) = aside_files(path)
    assert (aside / "inside.txt").read_text() == "kept"
    assert len(store_warnings(caplog)) == 1


async def test_a_file_truncated_under_a_live_store_is_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tools.db"
    async with SQLiteStore(path, StoreLimits()) as store:
        for i in range(60):
            await store.save(f"k{i}", Item({"i": i}, bytes([i]) * 8000, "g"))
        assert await store.load("k0") is not None  # the store's read connections are open and warm
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        os.truncate(path, path.stat().st_size // 3)
        with caplog.at_level(logging.WARNING, logger="mcpcache"):
            answers: list[Item | Exception | None] = []
            for i in range(30, 36):  # pages past the cut: never read by this store before
                try:
                    answers.append(await store.load(f"k{i}"))
                except sqlite3.DatabaseError as exc:  # allowed once: "the next call or the one after"
                    answers.append(exc)
            assert sum(isinstance(a, Exception) for a in answers) <= 1, answers
            assert await store.save("after", Item({}, b"after", "g"))
            assert await store.load("after") == Item({}, b"after", "g")
    assert len(aside_files(path)) == 1
    assert len(store_warnings(caplog)) == 1, store_warnings(caplog)


async def test_a_newer_schema_is_left_alone_and_a_file_beside_it_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tools.db"
    await filled(path, n=3)
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = path.read_bytes()
    with caplog.at_level(logging.WARNING, logger="mcpcache"):
        store = SQLiteStore(path)
        async with store:
            assert await store.load("k1") is None  # not this version's entries
            assert await store.save("k1", Item({}, b"mine", "g"))
            assert store.active_path == tmp_path / f"tools.v{SCHEMA_VERSION}.db"
        async with SQLiteStore(path) as reopened:
            assert await reopened.load("k1") == Item({}, b"mine", "g")
    assert path.read_bytes() == before  # the newer version's file is untouched
    assert aside_files(path) == []
    assert len(store_warnings(caplog)) == 2  # once per store opened: it is not repaired, it is shared
    assert "newer" in store_warnings(caplog)[0]


# -- the write-ahead log ---------------------------------------------------------------------------------

DISK_MULTIPLE = 3
"""SQLiteStore's documented bound: file + WAL <= 3 x max(max_bytes, 4 MiB)."""


def disk_use(path: Path) -> tuple[int, int]:
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size, (wal.stat().st_size if wal.exists() else 0)


async def test_a_reader_pinning_the_wal_cannot_grow_it_past_the_bound(tmp_path: Path, hold: Hold) -> None:
    path = tmp_path / "c.db"
    max_bytes = 4 * MiB
    bound = DISK_MULTIPLE * max(max_bytes, 4 * MiB)
    store = SQLiteStore(path, StoreLimits(max_bytes=max_bytes))
    async with store:
        for i in range(80):  # the file holds its bound's worth of items before the reader comes
            await store.save(f"fill{i}", Item({}, os.urandom(64 * 1024), "g"))
        await store.save("first", Item({}, b"x", "g"))
        holder = hold(path, "read")
        skipped = stored = 0
        worst = 0
        for i in range(400):  # 25 MiB of saves: six times the bound on items
            try:
                assert await store.save(f"k{i}", Item({"i": i}, os.urandom(64 * 1024), "g"))
                stored += 1
            except SQLiteWalFullError:
                skipped += 1
            worst = max(worst, sum(disk_use(path)))
        print(f"\nWAL pinned: {stored} saves stored, {skipped} skipped; worst file + WAL {worst / MiB:.1f} MiB")
        assert worst <= bound, (worst, bound)
        assert skipped > 0  # the pinned log did stop saves
        holder.release()
        assert await store.save("after", Item({}, os.urandom(64 * 1024), "g"))
        for i in range(20):  # the log is reset once it passes checkpoint_at
            assert await store.save(f"again{i}", Item({}, os.urandom(64 * 1024), "g"))
        _, wal = disk_use(path)
        assert wal <= store.checkpoint_at, wal
        print(f"after the reader let go: WAL {wal / MiB:.2f} MiB, file {disk_use(path)[0] / MiB:.1f} MiB")


# -- permissions -----------------------------------------------------------------------------------------


async def test_new_files_are_readable_by_their_owner_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCPCACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    old = os.umask(0o022)
    try:
        folder = opening.cache_dir()
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        store = opening.default_store("tools.db")
        async with store:
            await store.save("k", Item({}, b"private"))
            path = folder / "tools.db"
            for name in ("tools.db", "tools.db-wal", "tools.db-shm"):
                assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
            assert path.exists()
        os.chmod(folder, 0o755)  # as an older version left it
        assert stat.S_IMODE(opening.cache_dir().stat().st_mode) == 0o700
    finally:
        os.umask(old)
