"""What the stores do when their backend misbehaves: a SQLite file locked by someone else, a Redis crash.

The contract says stores raise and callers turn the error into a miss; these tests pin down that the
error comes quickly and names its cause, that nothing is corrupted, and that the store recovers.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis.exceptions
from support.redis_server import RedisServer
from support.sqlite_lock import Holder

from mcpcache.stores import Item, RedisStore, SQLiteBusyError, SQLiteStore, StoreLimits, Usage

pytestmark = pytest.mark.anyio


def LockHolder(path: Path) -> Holder:
    """Another process holding the SQLite file's write lock (BEGIN EXCLUSIVE) until released."""
    return Holder(path, "exclusive")


HoldLock = Callable[[Path], Holder]


@pytest.fixture
def lock_holder() -> Iterator[HoldLock]:
    holders: list[Holder] = []

    def hold(path: Path) -> Holder:
        holder = LockHolder(path)
        holders.append(holder)
        return holder

    yield hold
    for holder in holders:
        holder.kill()


async def test_a_locked_sqlite_file_raises_a_clear_error_and_recovers(tmp_path: Path, lock_holder: HoldLock) -> None:
    path = tmp_path / "locked.db"
    busy_timeout_s = 0.3
    async with SQLiteStore(path, StoreLimits(), busy_timeout_s=busy_timeout_s) as store:
        before = Item({"v": 1}, b"before", "g", 1.0)
        await store.save("before", before)
        holder = lock_holder(path)

        started = time.monotonic()
        with pytest.raises(SQLiteBusyError, match=r"locked\.db.*0\.3 s \(busy_timeout_s\)"):
            await store.save("during", Item({}, b"during", "g", 2.0))
        # Behaviour, not timing: it gave up rather than hanging (the bound is many times the timeout).
        assert time.monotonic() - started < busy_timeout_s + 10
        for attempt in (
            store.update_meta("before", {"v": 2}, None),
            store.remove("before"),
            store.remove_group("g"),
            store.trim_group("g", 0),
            store.remove_all(),
        ):
            with pytest.raises(SQLiteBusyError):
                await attempt

        # WAL readers never wait for the writer: what was committed still loads, and usage still reads.
        assert await store.load("before") == before
        assert await store.usage() == Usage(1, before.size)
        async with SQLiteStore(path, busy_timeout_s=busy_timeout_s) as opened_while_locked:
            assert await opened_while_locked.load("before") == before

        holder.release()
        await store.save("after", Item({}, b"after", "g", 3.0))
        assert await store.load("before") == before
        assert await store.load("during") is None
        assert await store.usage("g") == Usage(2, before.size + Item({}, b"after", "g").size)

    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM items WHERE created_at < 0").fetchone()[0] == 0


async def test_a_lock_held_by_a_killed_process_is_released(tmp_path: Path, lock_holder: HoldLock) -> None:
    path = tmp_path / "crashed.db"
    async with SQLiteStore(path, busy_timeout_s=0.3) as store:
        await store.save("k", Item({}, b"body", "g"))
        holder = lock_holder(path)
        with pytest.raises(SQLiteBusyError):
            await store.save("k2", Item({}, b"body", "g"))
        holder.kill()  # SQLite's locks die with the process, and its uncommitted writes with them
        await store.save("k2", Item({}, b"body", "g"))
        assert (await store.usage("g")).items == 2


@pytest.mark.redis
async def test_a_redis_crash_raises_connection_errors_and_the_store_recovers(own_redis_server: RedisServer) -> None:
    namespace = f"faults-{uuid.uuid4().hex[:8]}"
    async with RedisStore(own_redis_server.url, namespace=namespace) as store:
        await store.save("k", Item({"v": 1}, b"body", "g"))
        assert await store.load("k") is not None

        own_redis_server.kill()
        with pytest.raises(redis.exceptions.ConnectionError):
            await store.load("k")
        with pytest.raises(redis.exceptions.ConnectionError):
            await store.save("k", Item({"v": 2}, b"body", "g"))
        with pytest.raises(redis.exceptions.ConnectionError):
            await store.usage()

        own_redis_server.start()  # same port; without persistence the data is gone, the scripts too
        assert await store.load("k") is None
        await store.save("k", Item({"v": 3}, b"body", "g"))
        assert await store.load("k") == Item({"v": 3}, b"body", "g")
        assert await store.usage("g") == Usage(1, Item({"v": 3}, b"body", "g").size)
