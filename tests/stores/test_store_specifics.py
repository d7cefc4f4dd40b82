"""What each store promises beyond the shared contract: memory freed on eviction, the SQLite file format
and namespaces, Redis expiry and the clean-up of indexes whose item Redis dropped on its own."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
import tracemalloc
import uuid
from pathlib import Path

import anyio
import orjson
import pytest
import redis.asyncio

from mcpcache.stores import Item, MemoryStore, RedisStore, SQLiteStore, StoreLimits, Usage
from mcpcache.stores.items import Match, body_checksum
from mcpcache.stores.sqlite import SCHEMA_VERSION

from .legacy import V2_INSERT, V2_ITEMS, write_v1_file, write_v2_file

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


class TestMemoryStore:
    def test_bounded_by_default(self) -> None:
        assert MemoryStore().limits == StoreLimits(max_bytes=64 * MiB)

    async def test_evicted_bodies_are_freed(self) -> None:
        store = MemoryStore(StoreLimits(max_bytes=8 * MiB))
        tracemalloc.start()
        try:
            for index in range(64):  # 64 MiB through an 8 MiB store
                await store.save(f"k{index}", Item({"i": index}, os.urandom(MiB), "g"))
            held, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert (await store.usage()).bytes <= 8 * MiB
        assert held < 8 * MiB + 2 * MiB, f"{held / MiB:.1f} MiB still allocated"

    async def test_loaded_metadata_is_a_copy(self) -> None:
        store = MemoryStore()
        meta = {"tags": ["a"]}
        await store.save("k", Item(meta, b"body"))
        meta["tags"].append("mutated after save")
        loaded = await store.load("k")
        assert loaded is not None
        loaded.meta["tags"].append("mutated after load")
        assert (await store.load("k")) == Item({"tags": ["a"]}, b"body")


class TestSQLiteStore:
    def test_bounded_by_default(self, tmp_path: Path) -> None:
        assert SQLiteStore(tmp_path / "c.db").limits == StoreLimits(max_bytes=1024 * MiB)

    async def test_the_file_is_versioned_and_in_wal_mode(self, tmp_path: Path) -> None:
        async with SQLiteStore(tmp_path / "c.db") as store:
            await store.usage()
        with sqlite3.connect(tmp_path / "c.db") as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    async def test_a_version_1_file_opens_empty_at_the_current_version(self, tmp_path: Path) -> None:
        path = tmp_path / "v1.db"
        write_v1_file(path)
        async with SQLiteStore(path) as store:
            # Version-1 rows carry no checksum, so the migration starts the cache over rather than trust them.
            assert await store.load("old") is None
            assert await store.usage() == Usage(0, 0)
            saved = Item({"v": 2}, b"new body", "g", 2.0, None, 'W/"2"', 5.0)
            assert await store.save("new", saved)
            assert await store.load("new") == saved
            assert await store.usage("g") == Usage(1, saved.size)
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            columns = {row[1] for row in conn.execute("PRAGMA table_info(items)")}
            assert {"tag", "stamp", "checksum", "server", "tool"} <= columns
            assert conn.execute("SELECT count(*) FROM items").fetchone()[0] == 1
        async with SQLiteStore(path) as reopened:  # already at the current version: nothing is dropped again
            assert await reopened.load("new") == saved

    async def test_a_version_2_file_keeps_every_entry_and_gains_labels(self, tmp_path: Path) -> None:
        path = tmp_path / "v2.db"
        write_v2_file(path)
        async with SQLiteStore(path) as store:
            loaded = await store.load_many([key for key, *_ in V2_ITEMS])
            for (key, group, meta, body, tag), item in zip(V2_ITEMS, loaded, strict=True):
                assert item is not None, key
                assert (item.group, item.body, item.tag, item.stamp, item.meta) == (
                    group,
                    body,
                    tag,
                    2.0,
                    orjson.loads(meta),
                ), key
                # The tool cache's answers name their tool in their metadata: that label is filled in. Their
                # server was never recorded.
                assert (item.server, item.tool) == ("", "read_notebook" if group == "tools" else ""), key
            assert await store.usage() == Usage(3, sum(len(m) + len(b) for _, _, m, b, _ in V2_ITEMS))
            listed = [entry.key async for entry in store.entries(Match("tools", tool="read_notebook"))]
            assert listed == ["t:answer"]
            saved = Item({"v": 3}, b"new", "tools", server="https://example.test/mcp", tool="read")
            assert await store.save("new", saved)
            assert await store.load("new") == saved
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert conn.execute("SELECT count(*) FROM bodies").fetchone()[0] == 4
            indexes = {row[1] for row in conn.execute("PRAGMA index_list(items)")}
            assert "items_listing" in indexes

    async def test_a_version_2_writer_still_running_on_a_migrated_file_keeps_working(self, tmp_path: Path) -> None:
        # A process of the previous release that opened the file before the migration names its columns, so
        # its saves keep working; they carry no labels.
        path = tmp_path / "v2.db"
        write_v2_file(path)
        async with SQLiteStore(path) as store:
            await store.usage()
            with sqlite3.connect(path, isolation_level=None) as old:
                body = b"saved by the previous release"
                old.execute(V2_INSERT, ("late", "tools", 2 + len(body), 99, b"{}", None, body_checksum(body)))
                old.execute("INSERT INTO bodies (item_id, body) VALUES (last_insert_rowid(), ?)", (body,))
            assert await store.load("late") == Item({}, body, "tools", 1.0, None, None, 2.0)
            assert [entry.key async for entry in store.entries(Match("tools", server=""))] == ["late", "t:answer"]

    async def test_two_processes_opening_a_version_1_file_together_migrate_it_once(self, tmp_path: Path) -> None:
        path = tmp_path / "v1.db"
        write_v1_file(path)
        opener = (
            "import asyncio, sys\n"
            "from mcpcache.stores import Item, SQLiteStore\n"
            "async def main(path, name):\n"
            "    async with SQLiteStore(path) as store:\n"
            "        assert await store.save(name, Item({}, name.encode()))\n"
            "asyncio.run(main(*sys.argv[1:]))\n"
        )
        runs: list[subprocess.CompletedProcess[bytes]] = []

        async def run(name: str) -> None:
            runs.append(await anyio.run_process([sys.executable, "-c", opener, str(path), name], check=False))

        async with anyio.create_task_group() as tasks:  # started together: they race to migrate
            for name in ("first", "second"):
                tasks.start_soon(run, name)
        for done in runs:
            assert done.returncode == 0, done.stderr.decode()
        async with SQLiteStore(path) as store:
            assert await store.load_many(["first", "second", "old"]) == [
                Item({}, b"first"),
                Item({}, b"second"),
                None,
            ]

    async def test_a_file_from_a_newer_version_is_left_alone(self, tmp_path: Path) -> None:
        # A newer mcpcache may be using it: this version keeps its entries in a file of its own beside it.
        with sqlite3.connect(tmp_path / "new.db") as conn:
            conn.execute("PRAGMA user_version = 99")
        async with SQLiteStore(tmp_path / "new.db") as store:
            assert await store.load("k") is None
            assert await store.save("k", Item({}, b"body"))
            assert store.active_path == tmp_path / f"new.v{SCHEMA_VERSION}.db"
        with sqlite3.connect(tmp_path / "new.db") as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == 99

    async def test_namespaces_share_a_file_but_nothing_else(self, tmp_path: Path) -> None:
        path = tmp_path / "c.db"
        limits = StoreLimits(max_bytes=100)
        async with SQLiteStore(path, limits, namespace="a") as a, SQLiteStore(path, limits, namespace="b") as b:
            await a.save("k", Item({}, b"x" * 60, "g"))
            await b.save("k", Item({}, b"y" * 60, "g"))  # each namespace has its own bound
            assert (await a.load("k")) == Item({}, b"x" * 60, "g")
            assert (await b.load("k")) == Item({}, b"y" * 60, "g")
            await a.remove_all()
            assert await a.usage() == Usage(0, 0)
            assert await b.usage() == Usage(1, 62)

    async def test_a_closed_store_refuses_work(self, tmp_path: Path) -> None:
        store = SQLiteStore(tmp_path / "c.db")
        await store.save("k", Item({}, b"body"))
        await store.close()
        with pytest.raises(RuntimeError, match="closed"):
            await store.load("k")


@pytest.mark.redis
class TestRedisStore:
    @pytest.fixture
    async def store(self, redis_url: str) -> RedisStore:
        return RedisStore(redis_url, namespace=f"specifics-{uuid.uuid4().hex[:8]}")

    async def test_expiry_is_left_to_redis(self, store: RedisStore) -> None:
        async with store:
            expires_at = time.time() + 60
            await store.save("k", Item({}, b"body", "g", 0.0, expires_at))
            assert 0 < await store.client.pttl(store.item_key("k")) <= 60_000
            await store.update_meta("k", {}, None)
            assert await store.client.pttl(store.item_key("k")) == -1  # -1: the key lives without expiry
            await store.save("forever", Item({}, b"body"))
            assert await store.client.pttl(store.item_key("forever")) == -1

    async def test_indexes_do_not_outlive_an_item_redis_expired(self, store: RedisStore) -> None:
        async with store:
            await store.save("k", Item({}, b"body", "g", 0.0, time.time() + 0.2))
            await store.save("stays", Item({}, b"body", "g", 0.0, None))
            for _ in range(300):  # up to 15 s: a behaviour check with a generous deadline, not a timing one
                if not await store.client.exists(store.item_key("k")):
                    break
                await anyio.sleep(0.05)
            else:
                pytest.fail("Redis never expired the item")
            assert await store.usage("g") == Usage(1, Item({}, b"body").size)
            assert await _index_mentions(store, "k") == []

    async def test_an_item_dropped_behind_the_stores_back_is_cleaned_up_when_met(self, store: RedisStore) -> None:
        async with store:
            for key in ("a", "b", "c"):
                await store.save(key, Item({}, b"body", "g"))
            await store.client.delete(store.item_key("a"), store.item_key("b"))  # as a maxmemory eviction would
            assert await store.load("a") is None
            assert await _index_mentions(store, "a") == []
            assert await store.trim_group("g", 0) == 1  # only c was still there to evict
            assert await _index_mentions(store, "b") == []
            assert await store.usage() == Usage(0, 0)

    async def test_namespaces_are_isolated(self, redis_url: str) -> None:
        async with RedisStore(redis_url, namespace="iso-a") as a, RedisStore(redis_url, namespace="iso-b") as b:
            await a.remove_all()
            await b.remove_all()
            await a.save("k", Item({"ns": "a"}, b"a", "g"))
            await b.save("k", Item({"ns": "b"}, b"b", "g"))
            await a.remove_all()
            assert await a.load("k") is None
            assert await b.load("k") == Item({"ns": "b"}, b"b", "g")
            await b.remove_all()

    async def test_bad_configurations_are_refused(self, redis_url: str) -> None:
        with pytest.raises(ValueError, match="braces"):
            RedisStore(redis_url, namespace="a{b}")
        decoding = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
        try:
            with pytest.raises(ValueError, match="decode_responses"):
                RedisStore(decoding)
        finally:
            await decoding.aclose()

    async def test_a_callers_client_is_left_open(self, redis_url: str) -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            async with RedisStore(client, namespace=f"own-{uuid.uuid4().hex[:8]}") as store:
                await store.save("k", Item({}, b"body"))
                await store.remove_all()
            assert await client.ping()
        finally:
            await client.aclose()


async def _index_mentions(store: RedisStore, key: str) -> list[str]:
    prefix = "{" + store.namespace + "}:"
    found = []
    if await store.client.hexists(prefix + "d", key):
        found.append("directory")
    for index in ("lru", "x", "g:g", "c:g"):
        if await store.client.zscore(prefix + index, key) is not None:
            found.append(index)
    return found
