"""What each store promises beyond the shared contract: memory freed on eviction, the SQLite file format
and namespaces, Redis expiry and the clean-up of indexes whose item Redis dropped on its own."""

from __future__ import annotations

import os
import sqlite3
import time
import tracemalloc
import uuid
from pathlib import Path

import anyio
import pytest
import redis.asyncio

from mcpcache.stores import Item, MemoryStore, RedisStore, SQLiteStore, StoreLimits, Usage

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
            assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    async def test_a_file_from_a_newer_version_is_refused(self, tmp_path: Path) -> None:
        with sqlite3.connect(tmp_path / "new.db") as conn:
            conn.execute("PRAGMA user_version = 99")
        async with SQLiteStore(tmp_path / "new.db") as store:
            with pytest.raises(RuntimeError, match="schema version 99 is newer"):
                await store.load("k")

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
