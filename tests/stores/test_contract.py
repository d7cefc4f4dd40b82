"""The store contract (mcpcache/stores/base.py), run unchanged against memory, SQLite and Redis.

Every store must pass every test here, the way requests-cache runs one base class against all its
backends: a behaviour that differs between stores is a bug in one of them, not a documented quirk.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as mt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.client import CacheEntry, CacheKey

from mcpcache.stores import Item, Store, StoreLimits, Usage
from mcpcache.stores.base import SDK_GROUP, sdk_store_key

from .backends import Backend, memory_backend, redis_backend, sqlite_backend

pytestmark = pytest.mark.anyio

EMPTY_META_SIZE = 2  # b"{}"


def item(body: bytes = b"body", group: str = "g", created_at: float = 0.0, **meta: object) -> Item:
    return Item(meta=meta, body=body, group=group, created_at=created_at)


def sized(size: int, group: str = "g", created_at: float = 0.0) -> Item:
    """An item that counts exactly `size` bytes against a bound (body plus its `{}` metadata)."""
    return Item(meta={}, body=b"x" * (size - EMPTY_META_SIZE), group=group, created_at=created_at)


async def eventually(check: Callable[[], Awaitable[bool]], what: str, deadline_s: float = 15.0) -> None:
    """Poll until `check` holds; a behaviour assertion with a generous deadline, never a timing one."""
    give_up = time.monotonic() + deadline_s
    while not await check():
        if time.monotonic() > give_up:
            pytest.fail(f"{what} did not happen within {deadline_s} s")
        await anyio.sleep(0.05)


async def let_expire(backend: Backend, expires_at: float, gone: Callable[[], Awaitable[bool]]) -> None:
    """Bring time to `expires_at`. An injected clock jumps to the boundary itself (an item is expired once
    now reaches expires_at); Redis keeps its own time, so wait until `gone` holds."""
    if backend.clock is not None:
        backend.clock.now = expires_at
    else:
        await eventually(gone, "expiry")


async def missing(store: Store, key: str) -> bool:
    return await store.load(key) is None


async def holds(store: Store, group: str, items: int) -> bool:
    return (await store.usage(group)).items == items


def short_ttl(backend: Backend) -> float:
    # Redis keeps time itself: a few hundred milliseconds ahead, then poll until the item is gone.
    return 0.3 if backend.clock is None else 30.0


class TestRoundTrip:
    @pytest.mark.parametrize("size", [0, 1, 5 * 1024 * 1024], ids=["0B", "1B", "5MB"])
    async def test_save_then_load_returns_the_item(self, backend: Backend, size: int) -> None:
        body = os.urandom(size)
        meta = {"tool": "lire_le_carnet", "note": "naïve café ☕ 日本語 𝄞", "nested": {"list": [1, 2.5, None, True]}}
        stored = Item(meta=meta, body=body, group="conversation é/1", created_at=1234.5, expires_at=4.0e9)
        async with backend.open() as store:
            await store.save("clé/1", stored)
            loaded = await store.load("clé/1")
        assert loaded == stored
        assert loaded is not None
        assert type(loaded.body) is bytes

    async def test_missing_key_loads_as_none(self, backend: Backend) -> None:
        async with backend.open() as store:
            assert await store.load("never saved") is None

    async def test_load_many_answers_each_key_in_order(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("a", item(b"A"))
            await store.save("c", item(b"C", note="c"))
            loaded = await store.load_many(["c", "missing", "a", "c"])
            assert [i.body if i is not None else None for i in loaded] == [b"C", None, b"A", b"C"]
            assert loaded[0] == await store.load("c")
            assert await store.load_many([]) == []

    async def test_save_replaces_the_whole_item(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("k", Item(meta={"v": 1}, body=b"first", group="a", created_at=1.0))
            second = Item(meta={"v": 2}, body=b"second body", group="b", created_at=2.0)
            await store.save("k", second)
            assert await store.load("k") == second
            assert await store.usage("a") == Usage(0, 0)
            assert await store.usage("b") == Usage(1, second.size)
            assert await store.usage() == Usage(1, second.size)

    async def test_update_meta_keeps_the_body(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("k", Item(meta={"etag": 'W/"1"'}, body=b"big body", group="g", created_at=5.0))
            expires_at = backend.now() + 3600
            assert await store.update_meta("k", {"etag": 'W/"1"', "ttlMs": 60000}, expires_at)
            updated = await store.load("k")
            assert updated == Item({"etag": 'W/"1"', "ttlMs": 60000}, b"big body", "g", 5.0, expires_at)
            assert await store.usage("g") == Usage(1, updated.size)

    async def test_update_meta_of_a_missing_item_is_false(self, backend: Backend) -> None:
        async with backend.open() as store:
            assert not await store.update_meta("absent", {"a": 1}, None)
            assert await store.load("absent") is None
            assert await store.usage() == Usage(0, 0)

    async def test_remove(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("k", item())
            await store.save("other", item())
            await store.remove("k")
            await store.remove("k")  # removing what is not there is not an error
            assert await store.load("k") is None
            assert await store.load("other") is not None
            assert await store.usage() == Usage(1, item().size)

    async def test_remove_all(self, backend: Backend) -> None:
        async with backend.open() as store:
            for index in range(5):
                await store.save(f"k{index}", item(group=f"g{index % 2}"))
            await store.remove_all()
            assert await store.usage() == Usage(0, 0)
            assert await store.usage("g0") == Usage(0, 0)
            assert await store.load("k0") is None
            await store.save("k0", item())  # still usable afterwards
            assert await store.load("k0") == item()


class TestGroups:
    async def test_remove_group_drops_exactly_that_group(self, backend: Backend) -> None:
        async with backend.open() as store:
            for key, group in [("a", "conv-1"), ("b", "conv-1"), ("c", "conv-10"), ("d", "")]:
                await store.save(key, item(group=group))
            assert await store.remove_group("conv-1") == 2
            assert await store.remove_group("conv-1") == 0
            assert [await store.load(key) is not None for key in "abcd"] == [False, False, True, True]
            assert await store.usage("conv-10") == Usage(1, item().size)
            assert await store.usage("") == Usage(1, item().size)

    async def test_usage_per_group_and_in_total(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("a", sized(100, group="x"))
            await store.save("b", sized(50, group="x"))
            await store.save("c", sized(7, group="y"))
            assert await store.usage("x") == Usage(2, 150)
            assert await store.usage("y") == Usage(1, 7)
            assert await store.usage("nobody") == Usage(0, 0)
            assert await store.usage() == Usage(3, 157)

    async def test_trim_group_evicts_least_recently_used_and_loads_count_as_use(self, backend: Backend) -> None:
        async with backend.open() as store:
            for key in "abc":
                await store.save(key, sized(100, group="conv"))
            await store.save("elsewhere", sized(100, group="other"))
            assert await store.load("a") is not None  # a is now the most recently used of the group
            assert await store.trim_group("conv", 250) == 1
            assert await store.load("b") is None
            assert await store.usage("conv") == Usage(2, 200)
            assert await store.load("c") is not None  # now c is more recent than a
            assert await store.trim_group("conv", 150) == 1
            assert await store.load("a") is None
            assert await store.load("c") is not None
            assert await store.trim_group("conv", 0) == 1
            assert await store.usage("conv") == Usage(0, 0)
            assert await store.load("elsewhere") is not None

    async def test_trim_group_within_its_cap_evicts_nothing(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("a", sized(100, group="conv"))
            assert await store.trim_group("conv", 100) == 0
            assert await store.trim_group("nobody", 0) == 0
            assert await store.load("a") is not None

    async def test_remove_created_before_honours_the_group_prefix(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("old-1", item(group="ref:conv-1", created_at=100.0))
            await store.save("new-1", item(group="ref:conv-1", created_at=300.0))
            await store.save("old-2", item(group="ref:conv-2", created_at=199.9))
            await store.save("edge", item(group="ref:conv-2", created_at=200.0))
            await store.save("old-other", item(group="tool:s1", created_at=1.0))
            assert await store.remove_created_before("ref:", 200.0) == 2
            alive = {key: await store.load(key) is not None for key in ["old-1", "new-1", "old-2", "edge", "old-other"]}
            assert alive == {"old-1": False, "new-1": True, "old-2": False, "edge": True, "old-other": True}
            assert await store.remove_created_before("", 250.0) == 2  # "" matches every group
            assert await store.usage() == Usage(1, item().size)


class TestExpiry:
    async def test_expired_items_are_neither_returned_nor_counted(self, backend: Backend) -> None:
        async with backend.open() as store:
            soon = backend.now() + short_ttl(backend)
            await store.save("later", Item({}, b"later", "g", 0.0, backend.now() + 3600))
            await store.save("never", Item({}, b"never", "g", 0.0, None))
            await store.save("soon", Item({}, b"soon", "g", 0.0, soon))
            if backend.clock is not None:  # with a real clock this would be a timing assertion
                assert await store.load("soon") is not None
            await let_expire(backend, soon, lambda: missing(store, "soon"))
            assert await store.load("soon") is None
            assert await store.load("later") is not None
            assert await store.load("never") is not None
            live = Item({}, b"later", "g", 0.0).size + Item({}, b"never", "g", 0.0).size
            assert await store.usage("g") == Usage(2, live)
            assert await store.usage() == Usage(2, live)
            assert await store.remove_group("g") == 2  # counts cover live items only

    async def test_expiry_seen_only_through_usage_is_not_counted(self, backend: Backend) -> None:
        async with backend.open() as store:
            soon = backend.now() + short_ttl(backend)
            await store.save("soon", Item({}, b"soon", "g", 0.0, soon))
            await store.save("stay", Item({}, b"stay", "g", 0.0, None))
            await let_expire(backend, soon, lambda: holds(store, "g", 1))
            assert await store.usage("g") == Usage(1, Item({}, b"stay", "g", 0.0).size)
            assert await store.trim_group("g", 0) == 1

    async def test_saving_an_already_expired_item_stores_nothing(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("k", item())
            await store.save("k", Item({}, b"stale", "g", 0.0, backend.now() - 10))
            assert await store.load("k") is None
            assert await store.usage() == Usage(0, 0)

    async def test_update_meta_can_extend_or_end_the_life_of_an_item(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("k", Item({}, b"body", "g", 0.0, backend.now() + 3600))
            assert await store.update_meta("k", {"fresh": True}, None)
            assert (await store.load("k")) == Item({"fresh": True}, b"body", "g", 0.0, None)
            assert await store.update_meta("k", {"fresh": False}, backend.now() - 1)
            assert await store.load("k") is None
            assert await store.usage() == Usage(0, 0)
            assert not await store.update_meta("k", {}, None)

    async def test_expiry_judged_by_the_injected_clock(self, clocked_backend: Backend) -> None:
        backend = clocked_backend
        assert backend.clock is not None
        async with backend.open() as store:
            await store.save("k", Item({}, b"body", "g", 0.0, backend.now() + 10))
            backend.clock.advance(9.999)
            assert await store.load("k") is not None
            assert await store.update_meta("k", {"revalidated": True}, backend.now() + 10)
            backend.clock.advance(9.999)
            assert await store.load("k") is not None
            backend.clock.advance(0.001)
            assert await store.load("k") is None


class TestBounds:
    async def test_byte_bound_evicts_least_recently_used(self, backend: Backend) -> None:
        async with backend.open(StoreLimits(max_bytes=1000)) as store:
            for key in "abc":
                await store.save(key, sized(300))
            assert await store.load("a") is not None  # loads count as use: b is now the oldest
            await store.save("d", sized(300))
            assert await store.load("b") is None
            assert all([await store.load(key) is not None for key in "acd"])
            assert await store.usage() == Usage(3, 900)
            await store.save("e", sized(450))  # needs two evictions: a then c (d and e were used later)
            assert [await store.load(key) is not None for key in "acde"] == [False, False, True, True]
            assert await store.usage() == Usage(2, 750)

    async def test_saves_count_as_use(self, backend: Backend) -> None:
        async with backend.open(StoreLimits(max_bytes=700)) as store:
            await store.save("a", sized(300))
            await store.save("b", sized(300))
            await store.save("a", sized(300))  # a replaced: b is now the oldest
            await store.save("c", sized(300))
            assert [await store.load(key) is not None for key in "abc"] == [True, False, True]

    async def test_item_bound_evicts_least_recently_used(self, backend: Backend) -> None:
        async with backend.open(StoreLimits(max_items=2)) as store:
            await store.save("a", item())
            await store.save("b", item())
            assert await store.load("a") is not None
            await store.save("c", item())
            assert [await store.load(key) is not None for key in "abc"] == [True, False, True]
            assert (await store.usage()).items == 2

    async def test_an_item_larger_than_the_bound_is_not_stored(self, backend: Backend) -> None:
        async with backend.open(StoreLimits(max_bytes=1000)) as store:
            await store.save("small", sized(400))
            await store.save("big", sized(500))
            await store.save("big", sized(1001))  # the old "big" must not keep being served
            assert await store.load("big") is None
            assert await store.load("small") is not None
            assert await store.usage() == Usage(1, 400)
            await store.save("exact", sized(1000))  # exactly the bound fits, after evicting the rest
            assert await store.load("exact") is not None
            assert await store.usage() == Usage(1, 1000)

    async def test_update_meta_respects_the_byte_bound(self, backend: Backend) -> None:
        async with backend.open(StoreLimits(max_bytes=1000)) as store:
            await store.save("a", sized(400))
            await store.save("b", sized(400))
            await store.save("c", sized(150))
            # Growing b past what is left evicts the least recently used other item (a), never b itself.
            assert await store.update_meta("b", {"pad": "p" * 200}, None)
            assert [await store.load(key) is not None for key in "abc"] == [False, True, True]
            # Growing c past the whole bound drops it: a stale body must not outlive its metadata.
            assert await store.update_meta("c", {"pad": "p" * 1000}, None)
            assert await store.load("c") is None
            assert await store.usage() == Usage(1, (await store.load("b") or item()).size)


class TestConcurrency:
    async def test_many_tasks_saving_and_loading(self, backend: Backend) -> None:
        async with backend.open() as store:
            loaded_wrong: list[str] = []

            async def worker(index: int) -> None:
                mine = Item({"worker": index}, os.urandom(index * 100), f"g{index % 4}", float(index))
                for round_ in range(3):
                    await store.save(f"w{index}", mine)
                    await store.save("hot", Item({"worker": index, "round": round_}, b"hot", "hot", 0.0))
                    if await store.load(f"w{index}") != mine:
                        loaded_wrong.append(f"w{index}")
                    hot = await store.load("hot")
                    if hot is None or hot.body != b"hot":
                        loaded_wrong.append("hot")

            async with anyio.create_task_group() as tasks:
                for index in range(40):
                    tasks.start_soon(worker, index)
            assert loaded_wrong == []
            usage = await store.usage()
            hot = await store.load("hot")
            assert hot is not None
            expected = sum(Item({"worker": i}, b"x" * i * 100, "", 0.0).size for i in range(40)) + hot.size
            assert usage == Usage(41, expected)


class TestCorruption:
    async def test_a_corrupt_record_reads_as_none_and_is_deleted(self, persistent_backend: Backend) -> None:
        # Only stores whose records leave the process can find garbage underneath them.
        backend = persistent_backend
        assert backend.corruptions
        assert backend.raw_exists is not None
        async with backend.open() as store:
            await store.save("healthy", item(group="g"))
            for name, corrupt in backend.corruptions.items():
                await store.save("victim", item(group="g"))
                await corrupt(store, "victim")
                assert await store.load("victim") is None, name
                assert not await backend.raw_exists(store, "victim"), name
                assert await store.usage("g") == Usage(1, item().size), name
            assert await store.load("healthy") == item(group="g")

    async def test_a_store_reopened_on_the_same_storage_sees_the_items(self, persistent_backend: Backend) -> None:
        async with persistent_backend.open() as store:
            await store.save("k", item(group="g", note="survives"))
        async with persistent_backend.open() as reopened:
            assert await reopened.load("k") == item(group="g", note="survives")
            assert await reopened.usage("g") == Usage(1, item(note="survives").size)


def _tools(*names: str, ttl_ms: int = 60_000) -> mt.ListToolsResult:
    return mt.ListToolsResult(
        tools=[mt.Tool(name=name, input_schema={"type": "object"}) for name in names], ttl_ms=ttl_ms
    )


def _sdk_key(method: str = "tools/list", params_key: str = "", partition: str = "p") -> CacheKey:
    return CacheKey(method, params_key, f'["private", "2026-07-28", "arm", "{partition}"]')


class TestSDKResponseCacheStore:
    async def test_get_set_delete_round_trip(self, backend: Backend) -> None:
        async with backend.open() as store:
            listing = CacheEntry(value=_tools("echo", "sum"), scope="private", expires_at=backend.now() + 60)
            page = mt.ReadResourceResult(contents=[mt.TextResourceContents(uri="file:///a.txt", text="héllo")])
            read = CacheEntry(value=page, scope="public", expires_at=backend.now() + 60)
            await store.set(_sdk_key(), listing)
            await store.set(_sdk_key("resources/read", "file:///a.txt"), read)
            got = await store.get(_sdk_key())
            assert got is not None
            assert type(got.value) is mt.ListToolsResult
            assert (got.value, got.scope, got.expires_at) == (listing.value, "private", listing.expires_at)
            got_read = await store.get(_sdk_key("resources/read", "file:///a.txt"))
            assert got_read is not None
            assert (got_read.value, got_read.scope) == (page, "public")
            assert await store.get(_sdk_key(partition="someone else")) is None
            assert await store.get(_sdk_key("prompts/list")) is None
            await store.delete(_sdk_key())
            assert await store.get(_sdk_key()) is None
            assert await store.get(_sdk_key("resources/read", "file:///a.txt")) is not None

    async def test_entries_that_are_never_fresh_are_kept(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.set(_sdk_key(), CacheEntry(value=_tools("echo"), scope="private", expires_at=None))
            got = await store.get(_sdk_key())
            assert got is not None
            assert got.expires_at is None

    async def test_clear_drops_only_the_sdk_entries(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("tool-result", item(group="tool:s1"))
            await store.set(_sdk_key(), CacheEntry(value=_tools("echo"), scope="private", expires_at=None))
            await store.set(
                _sdk_key("prompts/list"),
                CacheEntry(value=mt.ListPromptsResult(prompts=[]), scope="public", expires_at=None),
            )
            assert (await store.usage(SDK_GROUP)).items == 2
            await store.clear()
            assert await store.get(_sdk_key()) is None
            assert await store.get(_sdk_key("prompts/list")) is None
            assert await store.load("tool-result") == item(group="tool:s1")

    @pytest.mark.parametrize(
        "meta",
        [
            {"type": "NotAResult", "scope": "private", "expiresAt": None},
            {"type": "BaseModel", "scope": "private", "expiresAt": None},
            {"type": "ListToolsResult", "scope": "everyone", "expiresAt": None},
            {"type": "ListToolsResult", "scope": "private", "expiresAt": "soon"},
        ],
        ids=["unknown type", "not a result", "bad scope", "bad expiry"],
    )
    async def test_a_wrong_shape_sdk_entry_is_a_miss_and_is_removed(
        self, backend: Backend, meta: dict[str, object]
    ) -> None:
        async with backend.open() as store:
            body = _tools("echo").model_dump_json(by_alias=True).encode()
            await store.save(sdk_store_key(_sdk_key()), Item(meta=meta, body=body, group=SDK_GROUP))
            assert await store.get(_sdk_key()) is None
            assert await store.load(sdk_store_key(_sdk_key())) is None

    async def test_a_body_that_does_not_validate_is_a_miss(self, backend: Backend) -> None:
        async with backend.open() as store:
            meta = {"type": "ListToolsResult", "scope": "private", "expiresAt": None}
            await store.save(sdk_store_key(_sdk_key()), Item(meta=meta, body=b'{"tools": 7}', group=SDK_GROUP))
            assert await store.get(_sdk_key()) is None
            assert await store.load(sdk_store_key(_sdk_key())) is None


class ModelStore:
    """The contract as a few lines of Python: an ordered dict whose order is the LRU order."""

    def __init__(self, limits: StoreLimits, clock: Callable[[], float]) -> None:
        self.limits = limits
        self.clock = clock
        self.items: OrderedDict[str, Item] = OrderedDict()

    def _purge(self) -> None:
        now = self.clock()
        for key in [k for k, v in self.items.items() if v.expires_at is not None and v.expires_at <= now]:
            del self.items[key]

    def _fits(self, size: int, count: int) -> bool:
        held = sum(value.size for value in self.items.values())
        max_bytes, max_items = self.limits.max_bytes, self.limits.max_items
        return (max_bytes is None or held + size <= max_bytes) and (
            max_items is None or len(self.items) + count <= max_items
        )

    def _insert(self, key: str, value: Item) -> None:
        if value.expires_at is not None and value.expires_at <= self.clock():
            return
        if self.limits.max_bytes is not None and value.size > self.limits.max_bytes:
            return
        while not self._fits(value.size, 1):
            self.items.popitem(last=False)
        self.items[key] = value

    def load(self, key: str) -> Item | None:
        self._purge()
        if key not in self.items:
            return None
        self.items.move_to_end(key)
        return self.items[key]

    def save(self, key: str, value: Item) -> None:
        self._purge()
        self.items.pop(key, None)
        self._insert(key, value)

    def update_meta(self, key: str, meta: dict[str, object], expires_at: float | None) -> bool:
        self._purge()
        old = self.items.pop(key, None)
        if old is None:
            return False
        self._insert(key, Item(meta, old.body, old.group, old.created_at, expires_at))
        return True

    def remove(self, key: str) -> None:
        self._purge()
        self.items.pop(key, None)

    def _remove_where(self, doomed: Callable[[Item], bool]) -> int:
        self._purge()
        keys = [key for key, value in self.items.items() if doomed(value)]
        for key in keys:
            del self.items[key]
        return len(keys)

    def remove_group(self, group: str) -> int:
        return self._remove_where(lambda value: value.group == group)

    def remove_created_before(self, prefix: str, before: float) -> int:
        return self._remove_where(lambda value: value.group.startswith(prefix) and value.created_at < before)

    def trim_group(self, group: str, max_bytes: int) -> int:
        self._purge()
        members = [key for key, value in self.items.items() if value.group == group]
        evicted = 0
        while sum(self.items[key].size for key in members) > max_bytes:
            del self.items[members.pop(0)]
            evicted += 1
        return evicted

    def usage(self, group: str | None = None) -> Usage:
        self._purge()
        values = [value for value in self.items.values() if group is None or value.group == group]
        return Usage(len(values), sum(value.size for value in values))


# Sizes on a grid whose sums land on, just under and just over the bounds, and weights that keep several
# items alive in each group: collisions, ties and evictions are what the model is there to check.
_KEYS = st.sampled_from(["a", "b", "c", "d", "e", "f"])
_GROUPS = ["", "conv:1", "conv:2"]
_BODY_SIZES = st.sampled_from([0, 10, 20, 30])  # items of 7, 17, 27 and 37 bytes with {"v":N}
_CAPS = st.sampled_from([0, 7, 16, 17, 33, 34, 35, 53, 54, 55, 100])
_BOUNDS = st.sampled_from([17, 27, 37, 44, 53, 54, 55, 64, 81, 100, 150])


def _operations() -> st.SearchStrategy[list[tuple[Any, ...]]]:
    ttl = st.one_of(st.none(), st.integers(1, 3)).map(lambda value: value if value != 3 else None)
    by_kind: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
        "save": st.tuples(st.just("save"), _KEYS, st.sampled_from(_GROUPS), _BODY_SIZES, st.integers(0, 3), ttl),
        "load": st.tuples(st.just("load"), _KEYS),
        "trim_group": st.tuples(st.just("trim_group"), st.sampled_from(_GROUPS), _CAPS),
        "update_meta": st.tuples(st.just("update_meta"), _KEYS, st.sampled_from([0, 10, 20]), ttl),
        "remove": st.tuples(st.just("remove"), _KEYS),
        "remove_group": st.tuples(st.just("remove_group"), st.sampled_from(_GROUPS)),
        "remove_created_before": st.tuples(
            st.just("remove_created_before"), st.sampled_from(["", "conv:", "conv:1", "t"]), st.integers(0, 1)
        ),
        "advance": st.tuples(st.just("advance"), st.integers(1, 2)),
    }
    # Weighted towards building state and reordering it; the destructive operations are rarer.
    weights = {"save": 8, "load": 5, "trim_group": 2, "update_meta": 2}
    kinds = [kind for kind in by_kind for _ in range(weights.get(kind, 1))]
    return st.lists(st.sampled_from(kinds).flatmap(by_kind.__getitem__), min_size=10, max_size=60)


def _timeless(operation: tuple[Any, ...]) -> tuple[Any, ...]:
    return (*operation[:-1], None) if operation[0] in ("save", "update_meta") else operation


_OPERATIONS = _operations()
_LIMITS = st.builds(StoreLimits, max_bytes=st.none() | _BOUNDS, max_items=st.none() | st.integers(2, 5))


class TestAgainstAModel:
    """For all operation sequences and bounds, a store answers exactly as the model does.

    The memory store is cheap, so it gets the most examples; the others share its generator and bugs
    in the logic they each reimplement (SQL, Lua) need fewer to show up.
    """

    @settings(max_examples=500, deadline=None)
    @given(operations=_OPERATIONS, limits=_LIMITS)
    async def test_memory(self, operations: list[tuple[Any, ...]], limits: StoreLimits) -> None:
        await _agrees_with_the_model(memory_backend(), operations, limits)

    @settings(max_examples=200, deadline=None)
    @given(operations=_OPERATIONS, limits=_LIMITS)
    async def test_sqlite(self, operations: list[tuple[Any, ...]], limits: StoreLimits) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            await _agrees_with_the_model(sqlite_backend(Path(scratch) / "cache.db"), operations, limits)

    @pytest.mark.redis
    @settings(max_examples=200, deadline=None)
    @given(operations=_OPERATIONS, limits=_LIMITS)
    async def test_redis(self, redis_url: str, operations: list[tuple[Any, ...]], limits: StoreLimits) -> None:
        # Redis keeps its own time: its sequences leave time out, and the model's clock stands still.
        timeless = [_timeless(operation) for operation in operations if operation[0] != "advance"]
        await _agrees_with_the_model(redis_backend(redis_url), timeless, limits)


async def _agrees_with_the_model(backend: Backend, operations: list[tuple[Any, ...]], limits: StoreLimits) -> None:
    model = ModelStore(limits, backend.now if backend.clock is not None else lambda: 0.0)
    async with backend.open(limits) as store:
        for step, operation in enumerate(operations):
            await _apply(store, model, backend, operation, step)
            for group in [None, *_GROUPS]:
                assert await store.usage(group) == model.usage(group), (operation, group)
        for key in ["a", "b", "c", "d", "e", "f"]:
            assert await store.load(key) == model.load(key), key
        await store.remove_all()


async def _apply(store: Store, model: ModelStore, backend: Backend, operation: tuple[Any, ...], step: int) -> None:
    now = backend.now() if backend.clock is not None else 0.0
    match operation:
        case ("save", key, group, body_size, created, ttl):
            value = Item({"v": step % 10}, b"b" * body_size, group, float(created), None if ttl is None else now + ttl)
            await store.save(key, value)
            model.save(key, value)
        case ("load", key):
            assert await store.load(key) == model.load(key), operation
        case ("update_meta", key, pad, ttl):
            meta: dict[str, object] = {"v": step % 10, "pad": "p" * pad}
            expires_at = None if ttl is None else now + ttl
            assert await store.update_meta(key, meta, expires_at) == model.update_meta(key, meta, expires_at)
        case ("remove", key):
            await store.remove(key)
            model.remove(key)
        case ("remove_group", group):
            assert await store.remove_group(group) == model.remove_group(group), operation
        case ("trim_group", group, max_bytes):
            assert await store.trim_group(group, max_bytes) == model.trim_group(group, max_bytes), operation
        case ("remove_created_before", prefix, before):
            assert await store.remove_created_before(prefix, before) == model.remove_created_before(prefix, before)
        case ("advance", seconds):
            assert backend.clock is not None
            backend.clock.advance(seconds)
        case _:
            raise AssertionError(f"unknown operation {operation!r}")
