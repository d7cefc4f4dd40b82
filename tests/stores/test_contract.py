"""The store contract (mcpcache/stores/base.py), run unchanged against memory, SQLite and Redis.

Every store must pass every test here, the way requests-cache runs one base class against all its
backends: a behaviour that differs between stores is a bug in one of them, not a documented quirk.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import mcp_types as mt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.client import CacheEntry, CacheKey

from mcpcache.stores import Item, RedisStore, Store, StoreLimits, Usage
from mcpcache.stores.items import Listed, Match, body_checksum
from mcpcache.stores.sdk import SDK_GROUP, sdk_store_key

from .backends import BYTE_FLIP, Backend, memory_backend, redis_backend, sqlite_backend

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
    # Redis keeps time itself: a few hundred milliseconds ahead, then poll until the item is gone. On a
    # cluster a walk of the namespace is 16 shards' round trips, so its items get a second before they go.
    if backend.clock is None:
        return 1.0 if backend.name == "redis-cluster" else 0.3
    return 30.0


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

    @pytest.mark.slow
    async def test_a_body_of_64_mb_round_trips_within_the_stores_own_timeouts(self, backend: Backend) -> None:
        # A Redis store bounds every operation by its socket timeout, and one that moves a body by the time
        # its length is allowed: a fixed 0.5 s would fail every load of this body.
        body = b"0123456789abcdef" * (4 * 1024 * 1024)
        async with backend.open() as store:
            assert await store.save("large", Item(meta={"n": 1}, body=body, group="g", tag="t"))
            (peeked,) = await store.peek_many(["large"])
            loaded, missing = await store.load_many(["large", "absent"])
        assert peeked is not None
        assert (peeked.body, peeked.checksum) == (b"", body_checksum(body))
        assert loaded is not None
        assert loaded.body == body
        assert missing is None

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


class TestStamps:
    """An answer to an older request never replaces the item of a newer one."""

    async def test_an_older_stamp_never_replaces_a_newer_item(self, backend: Backend) -> None:
        newer = Item({"v": "newer"}, b"newer body", "g", 1.0, None, 'W/"2"', 10.0)
        async with backend.open() as store:
            assert await store.save("k", newer)
            assert not await store.save("k", Item({"v": "older"}, b"older body", "other", 2.0, None, 'W/"1"', 9.5))
            assert await store.load("k") == newer
            assert await store.usage() == Usage(1, newer.size)
            assert await store.usage("other") == Usage(0, 0)

    async def test_an_equal_or_later_stamp_replaces(self, backend: Backend) -> None:
        async with backend.open() as store:
            assert await store.save("k", Item({"v": 1}, b"first", stamp=10.0))
            same = Item({"v": 2}, b"same stamp", stamp=10.0)
            assert await store.save("k", same)
            assert await store.load("k") == same
            later = Item({"v": 3}, b"later stamp", tag="t", stamp=10.5)
            assert await store.save("k", later)
            assert await store.load("k") == later

    async def test_stamps_are_compared_as_numbers_to_the_last_bit(self, backend: Backend) -> None:
        async with backend.open() as store:
            assert await store.save("k", Item({}, b"ten", stamp=10.0))
            assert not await store.save("k", Item({}, b"nine", stamp=9.0))  # "9.0" > "10.0" as text
            stamp = 1_750_000_000.123456
            assert await store.save("k", Item({}, b"now", stamp=stamp))
            assert not await store.save("k", Item({}, b"one ulp earlier", stamp=math.nextafter(stamp, 0.0)))
            loaded = await store.load("k")
            assert loaded is not None
            assert (loaded.body, loaded.stamp) == (b"now", stamp)
            assert await store.save("k", Item({}, b"one ulp later", stamp=math.nextafter(stamp, math.inf)))

    async def test_default_stamps_replace_each_other_as_before(self, backend: Backend) -> None:
        async with backend.open() as store:
            assert await store.save("k", item(b"one"))
            assert await store.save("k", item(b"two"))
            assert await store.load("k") == item(b"two")

    async def test_a_refused_save_changes_nothing_even_when_it_would_have_dropped_the_item(
        self, backend: Backend
    ) -> None:
        async with backend.open(StoreLimits(max_bytes=1000)) as store:
            newer = Item({}, b"newer", "g", stamp=5.0)
            await store.save("k", newer)
            assert not await store.save("k", Item({}, b"late and expired", "g", 0.0, backend.now() - 10, stamp=4.0))
            assert not await store.save("k", Item({}, b"x" * 2000, "g", stamp=4.0))  # larger than the bound
            assert await store.load("k") == newer

    async def test_save_says_whether_it_stored(self, backend: Backend) -> None:
        async with backend.open(StoreLimits(max_bytes=1000)) as store:
            await store.save("k", item())
            assert not await store.save("k", Item({}, b"stale", "g", 0.0, backend.now() - 10))
            assert await store.load("k") is None  # the previous item is dropped all the same
            await store.save("k", item())
            assert not await store.save("k", sized(1001))
            assert await store.load("k") is None
            assert await store.save("k", sized(1000))

    async def test_a_refused_save_does_not_count_as_a_use(self, backend: Backend) -> None:
        async with backend.open(StoreLimits(max_items=2)) as store:
            await store.save("a", Item({}, b"a", stamp=5.0))
            await store.save("b", Item({}, b"b"))
            assert not await store.save("a", Item({}, b"older a", stamp=1.0))
            await store.save("c", Item({}, b"c"))  # a is still the least recently used
            assert [await store.load(key) is not None for key in "abc"] == [False, True, True]

    async def test_an_expired_item_holds_back_no_stamp(self, backend: Backend) -> None:
        async with backend.open() as store:
            soon = backend.now() + short_ttl(backend)
            await store.save("k", Item({}, b"newer but expiring", "g", 0.0, soon, stamp=10.0))
            await let_expire(backend, soon, lambda: missing(store, "k"))
            older = Item({}, b"older", "g", stamp=1.0)
            assert await store.save("k", older)
            assert await store.load("k") == older

    async def test_tag_stamp_and_checksum_come_back(self, backend: Backend) -> None:
        async with backend.open() as store:
            tagged = Item({"a": 1}, b"tagged", "g", 3.0, None, 'W/"é 1"', 1_750_000_000.5)
            empty_tag = Item({"a": 1}, b"empty tag", "g", tag="")
            await store.save("tagged", tagged)
            await store.save("empty", empty_tag)
            await store.save("untagged", item(b"untagged"))
            loaded = await store.load_many(["tagged", "empty", "untagged"])
            assert loaded == [tagged, empty_tag, item(b"untagged")]
            assert [i.tag if i is not None else "missing" for i in loaded] == ['W/"é 1"', "", None]
            assert [i.checksum if i is not None else "" for i in loaded] == [
                body_checksum(b"tagged"),
                body_checksum(b"empty tag"),
                body_checksum(b"untagged"),
            ]

    async def test_a_checksum_passed_to_save_is_ignored(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("k", Item({}, b"body", checksum="not the checksum"))
            loaded = await store.load("k")
            assert loaded is not None
            assert loaded.checksum == body_checksum(b"body")

    async def test_a_stamp_that_cannot_be_ordered_is_refused(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("k", item())
            for stamp in (math.nan, math.inf):
                with pytest.raises(ValueError, match="stamp"):
                    await store.save("k", Item({}, b"x", stamp=stamp))
                with pytest.raises(ValueError, match="stamp"):
                    await store.update_meta("k", {}, None, stamp=stamp)
            assert await store.load("k") == item()


class TestCompareAndSet:
    """update_meta(if_tag=...) freshens only the body whose tag the revalidation sent."""

    async def test_a_matching_tag_updates_the_metadata_and_keeps_the_body(self, backend: Backend) -> None:
        saved = Item({"v": 1}, b"the body", "g", 2.0, None, 'W/"1"', 7.0)
        async with backend.open() as store:
            await store.save("k", saved)
            expires_at = backend.now() + 3600
            assert await store.update_meta("k", {"v": 2}, expires_at, if_tag='W/"1"')
            loaded = await store.load("k")
            assert loaded == Item({"v": 2}, b"the body", "g", 2.0, expires_at, 'W/"1"', 7.0)
            assert loaded is not None
            assert loaded.checksum == body_checksum(b"the body")

    async def test_another_tag_changes_nothing(self, backend: Backend) -> None:
        saved = Item({"v": 1}, b"the body", "g", 2.0, backend.now() + 600, 'W/"1"', 7.0)
        async with backend.open() as store:
            await store.save("k", saved)
            for other in ('W/"2"', '"1"', 'w/"1"', 'W/"1" ', ""):
                assert not await store.update_meta("k", {"v": 2}, None, if_tag=other), other
            assert await store.load("k") == saved

    async def test_an_item_without_a_tag_matches_no_tag(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("k", item())
            assert not await store.update_meta("k", {"v": 2}, None, if_tag="")
            assert not await store.update_meta("k", {"v": 2}, None, if_tag="anything")
            assert await store.load("k") == item()
            assert await store.update_meta("k", {"v": 2}, None)  # without if_tag, as before
            assert await store.load("k") == Item({"v": 2}, b"body", "g")

    async def test_a_missing_item_is_false(self, backend: Backend) -> None:
        async with backend.open() as store:
            assert not await store.update_meta("absent", {"v": 2}, None, if_tag="t")
            assert not await store.update_meta("absent", {"v": 2}, None, if_tag="t", stamp=5.0)
            assert await store.load("absent") is None
            assert await store.usage() == Usage(0, 0)

    async def test_an_earlier_stamp_is_refused_and_a_later_one_recorded(self, backend: Backend) -> None:
        saved = Item({"v": 1}, b"the body", "g", 0.0, None, "t", 10.0)
        async with backend.open() as store:
            await store.save("k", saved)
            assert not await store.update_meta("k", {"v": 2}, None, stamp=9.0)
            assert not await store.update_meta("k", {"v": 2}, None, if_tag="t", stamp=9.999)
            assert await store.load("k") == saved
            assert await store.update_meta("k", {"v": 3}, None, if_tag="t", stamp=10.0)
            assert await store.update_meta("k", {"v": 4}, None, stamp=12.0)
            assert await store.load("k") == Item({"v": 4}, b"the body", "g", 0.0, None, "t", 12.0)
            assert await store.update_meta("k", {"v": 5}, None)  # no stamp given: the stamp is kept
            assert await store.load("k") == Item({"v": 5}, b"the body", "g", 0.0, None, "t", 12.0)
            # The recorded stamp now holds back a save of an answer sent before it.
            assert not await store.save("k", Item({"v": "old"}, b"old", "g", 0.0, None, "t", 11.0))
            assert await store.save("k", Item({"v": "new"}, b"new", "g", 0.0, None, "u", 12.0))

    async def test_a_refused_update_does_not_count_as_a_use(self, backend: Backend) -> None:
        async with backend.open(StoreLimits(max_items=2)) as store:
            await store.save("a", Item({}, b"a", tag="t"))
            await store.save("b", Item({}, b"b"))
            assert not await store.update_meta("a", {"v": 2}, None, if_tag="u")
            await store.save("c", Item({}, b"c"))
            assert [await store.load(key) is not None for key in "abc"] == [False, True, True]

    async def test_an_admitted_update_that_no_longer_fits_still_drops_the_item(self, backend: Backend) -> None:
        async with backend.open(StoreLimits(max_bytes=100)) as store:
            await store.save("k", Item({}, b"x" * 50, tag="t"))
            assert await store.update_meta("k", {"pad": "p" * 100}, None, if_tag="t")
            assert await store.load("k") is None


class TestChecksums:
    async def test_a_flipped_body_byte_is_a_miss_and_the_record_is_gone(
        self, backend: Backend, caplog: pytest.LogCaptureFixture
    ) -> None:
        assert backend.raw_exists is not None
        async with backend.open() as store:
            await store.save("healthy", item(b"healthy body"))
            await store.save("victim", Item({"v": 1}, b"victim body", "g", tag="t", stamp=3.0))
            await backend.corruptions[BYTE_FLIP](store, "victim")
            with caplog.at_level(logging.WARNING, logger="mcpcache.stores"):
                assert await store.load("victim") is None
            warnings = [r for r in caplog.records if r.name.startswith("mcpcache.stores")]
            assert len(warnings) == 1
            assert "victim" in warnings[0].getMessage()
            assert not await backend.raw_exists(store, "victim")  # the second, raw look finds nothing
            assert await store.load("victim") is None
            assert await store.load("healthy") == item(b"healthy body")
            assert await store.usage() == Usage(1, item(b"healthy body").size)
            assert await store.save("victim", Item({"v": 2}, b"victim body", "g"))  # the key is usable again

    async def test_load_many_verifies_every_body(self, backend: Backend) -> None:
        assert backend.raw_exists is not None
        async with backend.open() as store:
            for key in "abc":
                await store.save(key, item(f"body {key}".encode()))
            await backend.corruptions[BYTE_FLIP](store, "b")
            loaded = await store.load_many(["a", "b", "c", "b"])
            assert loaded == [item(b"body a"), None, item(b"body c"), None]
            assert not await backend.raw_exists(store, "b")

    async def test_peek_many_answers_as_load_many_without_the_bodies(self, backend: Backend) -> None:
        async with backend.open() as store:
            expires_at = backend.now() + 3600
            await store.save("a", Item({"v": 1}, b"body a", "g", 2.0, expires_at, "tag-a", 5.0))
            await store.save("b", Item({"v": 2}, b"body b", "h", 3.0))
            peeked = await store.peek_many(["b", "missing", "a", "b"])
            loaded = await store.load_many(["b", "missing", "a", "b"])
            assert [None if p is None else p.body for p in peeked] == [b"", None, b"", b""]
            for p, full in zip(peeked, loaded, strict=True):
                if full is None:
                    assert p is None
                    continue
                assert p is not None
                assert (p.meta, p.group, p.created_at, p.expires_at, p.tag, p.stamp, p.checksum) == (
                    full.meta,
                    full.group,
                    full.created_at,
                    full.expires_at,
                    full.tag,
                    full.stamp,
                    full.checksum,
                )
            assert peeked[2] is not None
            assert peeked[2].checksum == body_checksum(b"body a")
            assert await store.peek_many([]) == []

    async def test_peek_now_answers_as_peek_many_or_not_at_all(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("a", Item({"v": 1}, b"body a", "g", 2.0, backend.now() + 3600, "tag-a", 5.0))
            await store.save("b", Item({"v": 2}, b"body b", "h", 3.0))
            keys = ["b", "missing", "a"]

            async def settled() -> list[Item | None] | None:
                # A store may answer peek_now only with what it peeked since its storage last changed
                # (SQLite: its first peek opens what it watches the file with, its first ask reads it).
                for _ in range(2):
                    store.peek_now(keys)
                    await store.peek_many(keys)
                return store.peek_now(keys)

            now = await settled()
            # Only a store that can answer without blocking answers (memory; SQLite from what it peeked
            # while the file has not changed); the others send the caller to peek_many, whose deadline it
            # then keeps.
            assert (now is not None) == (backend.name in ("memory", "sqlite"))
            if now is not None:
                assert now == await store.peek_many(keys)
                assert [p.checksum if p is not None else None for p in now] == [
                    body_checksum(b"body b"),
                    None,
                    body_checksum(b"body a"),
                ]
                assert store.peek_now(keys) == now  # asked again: answered from what it kept
                await store.update_meta("a", {"v": 3}, None, if_tag="tag-a", stamp=6.0)
                await store.remove("b")
                after = store.peek_now(keys)
                assert after is None or after == await store.peek_many(keys)
                assert await settled() == await store.peek_many(keys)
                await store.save("a", Item({"v": 4}, b"body a2", "g", 7.0, None, "tag-a2", 8.0))
                assert store.peek_now(keys) in (None, await store.peek_many(keys))
                again = await settled()
                assert again == await store.peek_many(keys)
                assert again[2] is not None
                assert dict(again[2].meta) == {"v": 4}
                assert again[2].checksum == body_checksum(b"body a2")

    async def test_peek_now_never_answers_past_another_stores_write(self, backend: Backend) -> None:
        """Another store on the same storage (SQLite: another connection to the file, as another process
        has) writes; a peek_now after it never answers what was there before."""
        if not backend.persistent:
            pytest.skip("a memory store's storage is its own")
        async with backend.open() as store, backend.open() as other:
            await store.save("a", Item({"v": 1}, b"body a", "g", 2.0, None, "tag-a", 5.0))
            keys = ["a", "m"]
            for _ in range(2):
                store.peek_now(keys)
                await store.peek_many(keys)
            for change in range(4):
                held = store.peek_now(keys)
                assert (held is not None) == (backend.name == "sqlite")  # what a stale answer would be
                if change == 0:
                    await other.update_meta("a", {"v": 2}, None, stamp=6.0)
                    expect = {"v": 2}
                elif change == 1:
                    await other.save("m", Item({"mark": 1}, b"", "g", 3.0, stamp=7.0))
                    expect = {"v": 2}
                elif change == 2:
                    await other.save("a", Item({"v": 3}, b"body a3", "g", 4.0, None, "tag-a3", 8.0))
                    expect = {"v": 3}
                else:
                    await other.remove("a")
                    expect = None
                seen = store.peek_now(keys)
                fresh = await store.peek_many(keys)
                assert seen is None or seen == fresh
                assert (dict(fresh[0].meta) if fresh[0] is not None else None) == expect
                store.peek_now(keys)
                await store.peek_many(keys)

    async def test_peek_many_follows_every_change_of_the_body_metadata_and_expiry(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("k", Item({"v": 1}, b"first", "g", tag="t1", stamp=1.0))
            first = (await store.peek_many(["k"]))[0]
            assert first is not None
            assert (first.tag, first.checksum) == ("t1", body_checksum(b"first"))
            assert await store.update_meta("k", {"v": 2}, None, if_tag="t1", stamp=2.0)
            updated = (await store.peek_many(["k"]))[0]
            assert updated is not None
            assert (updated.meta, updated.tag, updated.checksum, updated.stamp) == ({"v": 2}, "t1", first.checksum, 2.0)
            await store.save("k", Item({"v": 3}, b"second", "g", tag="t2", stamp=3.0))
            replaced = (await store.peek_many(["k"]))[0]
            assert replaced is not None
            assert (replaced.tag, replaced.checksum) == ("t2", body_checksum(b"second"))
            await store.remove("k")
            assert await store.peek_many(["k"]) == [None]
            expires_at = backend.now() + short_ttl(backend)
            await store.save("e", Item({}, b"brief", "g", expires_at=expires_at))
            assert (await store.peek_many(["e"]))[0] is not None

            async def peeked_gone() -> bool:
                return (await store.peek_many(["e"]))[0] is None

            await let_expire(backend, expires_at, peeked_gone)
            assert await peeked_gone()

    async def test_peek_many_counts_as_a_use(self, backend: Backend) -> None:
        async with backend.open(StoreLimits(max_items=2)) as store:
            await store.save("old", item(b"old"))
            await store.save("new", item(b"new"))
            await store.peek_many(["old"])
            await store.save("third", item(b"third"))  # evicts the least recently used: "new"
            assert [i is not None for i in await store.load_many(["old", "new", "third"])] == [True, False, True]

    async def test_a_corrupt_body_is_found_by_the_next_load_not_by_a_peek(self, backend: Backend) -> None:
        assert backend.raw_exists is not None
        async with backend.open() as store:
            await store.save("k", Item({"v": 1}, b"body k", "g", tag="t"))
            await backend.corruptions[BYTE_FLIP](store, "k")
            peeked = (await store.peek_many(["k"]))[0]
            assert peeked is not None
            assert peeked.checksum == body_checksum(b"body k")
            assert await store.load("k") is None
            assert await store.peek_many(["k"]) == [None]

    async def test_an_update_of_the_metadata_keeps_the_checksum_honest(self, backend: Backend) -> None:
        async with backend.open() as store:
            await store.save("k", item(b"body"))
            assert await store.update_meta("k", {"v": 2}, None)
            await backend.corruptions[BYTE_FLIP](store, "k")
            assert await store.load("k") is None


def labelled(key: str, server: str, tool: str, *, group: str = "tools", body: bytes = b"body") -> Item:
    return Item({"k": key}, body, group, created_at=1.0, tag=f"t-{key}", stamp=2.0, server=server, tool=tool)


REDIS_SMALL_HASH = 128
"""Redis answers one scan step of a hash this small (its hash-max-listpack-entries) with the whole hash."""


async def walk(store: Store, match: Match, page_size: int) -> list[Listed]:
    """Every entry of a walk, page by page, checking each page's bound on the way."""
    listed: list[Listed] = []
    cursor: str | None = None
    bound = max(page_size, REDIS_SMALL_HASH) if isinstance(store, RedisStore) else page_size
    while True:
        page = await store.list_page(match, cursor, page_size)
        assert len(page.entries) <= bound
        listed.extend(page.entries)
        if page.cursor is None:
            return listed
        cursor = page.cursor


# Nine items over two servers and three tools, and one of another group with the same labels.
_LABELLED = [(f"k{n}", f"server-{n % 2}", ("read", "list", "naïve ☕")[n % 3]) for n in range(9)]


class TestListing:
    """Labels, and the listing, counting and removal by group, server and tool that `mcpcache cache` uses."""

    async def test_labels_come_back_from_every_read_and_survive_a_metadata_update(self, backend: Backend) -> None:
        async with backend.open() as store:
            saved = labelled("k", "https://example.test/mcp", "read_notebook")
            await store.save("k", saved)
            assert await store.load("k") == saved
            peeked = (await store.peek_many(["k"]))[0]
            assert peeked is not None
            assert (peeked.server, peeked.tool) == (saved.server, saved.tool)
            assert await store.update_meta("k", {"k": "updated"}, None, if_tag="t-k", stamp=3.0)
            updated = await store.load("k")
            assert updated is not None
            assert (updated.server, updated.tool, updated.meta) == (saved.server, saved.tool, {"k": "updated"})
            await store.save("k", Item({}, b"plain", "tools", stamp=4.0))  # a save replaces the labels too
            replaced = await store.load("k")
            assert replaced is not None
            assert (replaced.server, replaced.tool) == ("", "")

    @pytest.mark.parametrize("page_size", [1, 4, 200])
    async def test_a_walk_lists_each_matching_item_once_without_its_body(
        self, backend: Backend, page_size: int
    ) -> None:
        async with backend.open() as store:
            for key, server, tool in _LABELLED:
                await store.save(key, labelled(key, server, tool, body=key.encode() * 10))
            await store.save("other", labelled("other", "server-0", "read", group="refs"))
            listed = await walk(store, Match("tools"), page_size)
            assert sorted(entry.key for entry in listed) == sorted(key for key, _, _ in _LABELLED)
            for entry in listed:
                full = await store.load(entry.key)
                assert full is not None
                assert entry.item == dataclasses.replace(full, body=b"")
                assert entry.item.checksum == full.checksum
                assert entry.size == full.size
            for server in ("server-0", "server-1", "nobody"):
                for tool in (None, "read", "naïve ☕"):
                    match = Match("tools", server=server, tool=tool)
                    expected = sorted(k for k, s, t in _LABELLED if s == server and (tool is None or t == tool))
                    assert sorted(entry.key for entry in await walk(store, match, page_size)) == expected, match
            by_tool = await walk(store, Match("tools", tool="list"), page_size)
            assert sorted(entry.key for entry in by_tool) == sorted(k for k, _, t in _LABELLED if t == "list")
            assert await walk(store, Match("no such group"), page_size) == []

    async def test_listing_is_not_a_use(self, backend: Backend) -> None:
        async with backend.open(StoreLimits(max_items=2)) as store:
            await store.save("old", labelled("old", "s", "t"))
            await store.save("new", labelled("new", "s", "t"))
            await store.load("new")
            assert len(await walk(store, Match("tools"), 1)) == 2
            await store.save("third", labelled("third", "s", "t"))  # evicts the least recently used: "old"
            assert [i is not None for i in await store.load_many(["old", "new", "third"])] == [False, True, True]

    async def test_expired_items_are_not_listed_counted_or_removed(self, backend: Backend) -> None:
        async with backend.open() as store:
            expires_at = backend.now() + short_ttl(backend)
            await store.save("brief", Item({}, b"brief", "tools", expires_at=expires_at, server="s", tool="t"))
            await store.save("kept", labelled("kept", "s", "t"))
            assert len(await walk(store, Match("tools"), 10)) == 2

            async def listed_once() -> bool:
                return len(await walk(store, Match("tools"), 10)) == 1

            await let_expire(backend, expires_at, listed_once)
            assert [entry.key for entry in await walk(store, Match("tools"), 10)] == ["kept"]
            assert await store.count(Match("tools")) == Usage(1, labelled("kept", "s", "t").size)
            assert await store.remove_matching(Match("tools", server="s")) == 1

    async def test_count_is_what_a_walk_sums(self, backend: Backend) -> None:
        async with backend.open() as store:
            for key, server, tool in _LABELLED:
                await store.save(key, labelled(key, server, tool, body=b"x" * len(key) * 7))
            await store.save("other", labelled("other", "server-0", "read", group="refs"))
            for match in (Match("tools"), Match("tools", server="server-1"), Match("tools", tool="read"), Match("x")):
                listed = await walk(store, match, 3)
                assert await store.count(match) == Usage(len(listed), sum(e.size for e in listed)), match
            assert await store.count(Match("tools")) == await store.usage("tools")

    async def test_remove_matching_removes_exactly_what_a_walk_lists(self, backend: Backend) -> None:
        async with backend.open() as store:
            for key, server, tool in _LABELLED:
                await store.save(key, labelled(key, server, tool))
            await store.save("other", labelled("other", "server-0", "read", group="refs"))
            doomed = {k for k, s, t in _LABELLED if s == "server-0" and t == "read"}
            assert await store.remove_matching(Match("tools", server="server-0", tool="read")) == len(doomed)
            for key, _, _ in _LABELLED:
                assert (await store.load(key) is None) == (key in doomed), key
            assert await store.remove_matching(Match("tools", tool="list")) == sum(
                1 for k, _, t in _LABELLED if t == "list" and k not in doomed
            )
            left = len(_LABELLED) - len(doomed) - sum(1 for k, _, t in _LABELLED if t == "list" and k not in doomed)
            assert await store.usage("tools") == Usage(left, labelled("k1", "s", "t").size * left)
            assert await store.remove_matching(Match("tools")) == left
            assert await store.usage() == Usage(1, labelled("other", "server-0", "read").size)
            assert await store.load("other") is not None

    async def test_a_walk_survives_removals_between_pages(self, backend: Backend) -> None:
        async with backend.open() as store:
            for key, server, tool in _LABELLED:
                await store.save(key, labelled(key, server, tool))
            first = await store.list_page(Match("tools"), None, 3)
            seen = [entry.key for entry in first.entries]
            for key in seen:
                await store.remove(key)
            cursor = first.cursor
            while cursor is not None:
                page = await store.list_page(Match("tools"), cursor, 3)
                seen.extend(entry.key for entry in page.entries)
                cursor = page.cursor
            assert set(seen) == {key for key, _, _ in _LABELLED}

    async def test_a_cursor_from_elsewhere_is_refused(self, backend: Backend) -> None:
        async with backend.open() as store:
            with pytest.raises(ValueError, match="cursor"):
                await store.list_page(Match("tools"), "not a cursor")

    async def test_listing_reads_no_body(self, backend: Backend) -> None:
        # A body flipped underneath the store is found by the next load; a listing does not read it.
        async with backend.open() as store:
            await store.save("k", labelled("k", "s", "t"))
            await backend.corruptions[BYTE_FLIP](store, "k")
            assert [entry.key for entry in await walk(store, Match("tools"), 10)] == ["k"]
            assert await store.load("k") is None
            assert await walk(store, Match("tools"), 10) == []

    async def test_a_corrupt_record_never_breaks_a_walk(self, persistent_backend: Backend) -> None:
        # Listed or skipped, depending on what is corrupt (a listing does not read the body); gone once loaded.
        backend = persistent_backend
        async with backend.open() as store:
            await store.save("healthy", labelled("healthy", "s", "t"))
            for name, corrupt in backend.corruptions.items():
                await store.save("victim", labelled("victim", "s", "t"))
                await corrupt(store, "victim")
                assert "healthy" in [entry.key for entry in await walk(store, Match("tools"), 10)], name
                assert (await store.count(Match("tools"))).items >= 1, name
                assert await store.load("victim") is None, name
                assert [entry.key for entry in await walk(store, Match("tools"), 10)] == ["healthy"], name


def _stamped(stamp: float) -> Item:
    """The item an answer to a request sent at `stamp` would be: its stamp is written into all its parts."""
    return Item({"stamp": stamp}, repr(stamp).encode() * 8, "race", 0.0, None, repr(stamp), stamp)


def _tagged(tag: str, n: int) -> Item:
    """A body of version `tag`: the tag is written into its metadata and its body, to catch mismatches."""
    return Item({"tag": tag, "freshened": False}, f"{tag}:{n};".encode() * 16, "race", 0.0, None, tag)


def _consistent(loaded: Item) -> bool:
    return loaded.meta.get("tag") == loaded.tag == loaded.body[:1].decode()


def _random_stamps(count: int) -> list[float]:
    """`count` distinct stamps in random order around the current epoch."""
    return [1_750_000_000 + n / 7 for n in random.sample(range(10_000_000), count)]


async def _retried(attempt: Callable[[], Awaitable[Any]]) -> Any:
    """An operation tried again when the store raises: a store may refuse a write it cannot get the lock for
    in time (SQLite), and a refused write changed nothing. These tests are about atomicity, not waiting."""
    for _ in range(200):
        try:
            return await attempt()
        except Exception:
            await anyio.sleep(0.01)
    return await attempt()


class TestRacingWriters:
    """Many writers on one key: the comparisons must be atomic with the writes they guard."""

    async def test_racing_saves_leave_the_item_with_the_greatest_stamp(self, backend: Backend) -> None:
        stamps = _random_stamps(300)
        greatest = max(stamps)
        refused_greatest: list[float] = []
        async with backend.open() as store:

            async def saver(mine: list[float]) -> None:
                for stamp in mine:
                    stored = await _retried(lambda stamp=stamp: store.save("hot", _stamped(stamp)))
                    if not stored and stamp == greatest:
                        refused_greatest.append(stamp)
                    await anyio.lowlevel.checkpoint()

            async with anyio.create_task_group() as tasks:
                for index in range(30):
                    tasks.start_soon(saver, stamps[index::30])
            assert refused_greatest == []
            assert await store.load("hot") == _stamped(greatest)
            assert await store.usage() == Usage(1, _stamped(greatest).size)

    async def test_a_revalidation_never_freshens_another_tags_body(self, backend: Backend) -> None:
        inconsistent: list[Item] = []
        async with backend.open() as store:
            await store.save("k", _tagged("A", 0))

            async def look() -> None:
                loaded = await store.load("k")
                if loaded is not None and not _consistent(loaded):
                    inconsistent.append(loaded)

            async def saver(index: int) -> None:
                for n in range(40):
                    await _retried(lambda n=n: store.save("k", _tagged("AB"[(n + index) % 2], n)))
                    await look()

            async def revalidator(index: int) -> None:
                for n in range(40):
                    meta = {"tag": "A", "freshened": True, "by": index, "n": n}
                    await _retried(lambda meta=meta: store.update_meta("k", meta, None, if_tag="A"))
                    await look()

            async with anyio.create_task_group() as tasks:
                for index in range(8):
                    tasks.start_soon(saver, index)
                    tasks.start_soon(revalidator, index)
            assert inconsistent == []
            final = await store.load("k")
            assert final is not None
            assert _consistent(final)


RACER = """
import asyncio, json, sys
from mcpcache.stores import Item, RedisStore, SQLiteStore, StoreLimits

def open_store(kind, location, namespace):
    if kind == "sqlite":
        # A long lock wait: this race is about atomicity, and a skipped write would only thin it out.
        return SQLiteStore(location, StoreLimits(), namespace=namespace, busy_timeout_s=10.0)
    # Generous too: on a loaded machine a first connection (a cluster's discovery) can outlast 0.5 s.
    return RedisStore(location, namespace=namespace, socket_timeout_s=10.0, connect_timeout_s=10.0)

def stamped(stamp):
    return Item({"stamp": stamp}, repr(stamp).encode() * 8, "race", 0.0, None, repr(stamp), stamp)

def tagged(tag, n):
    return Item({"tag": tag, "freshened": False}, f"{tag}:{n};".encode() * 16, "race", 0.0, None, tag)

def consistent(item):
    return item.meta.get("tag") == item.tag == item.body[:1].decode()

async def main(kind, location, namespace, stamps):
    refused = []
    inconsistent = 0
    async with open_store(kind, location, namespace) as store:
        await store.usage()  # connected (and the SQLite file prepared) before the start signal
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

        async def saver(mine):
            for stamp in mine:
                if not await store.save("hot", stamped(stamp)):
                    refused.append(stamp)

        async def look():
            nonlocal inconsistent
            item = await store.load("k")
            if item is not None and not consistent(item):
                inconsistent += 1

        async def tag_saver(index):
            for n in range(30):
                await store.save("k", tagged("AB"[(n + index) % 2], n))
                await look()

        async def revalidator(index):
            for n in range(30):
                await store.update_meta("k", {"tag": "A", "freshened": True, "n": n}, None, if_tag="A")
                await look()

        await asyncio.gather(
            *(saver(stamps[index::10]) for index in range(10)),
            *(tag_saver(index) for index in range(5)),
            *(revalidator(index) for index in range(5)),
        )
    print(json.dumps({"refused": refused, "inconsistent": inconsistent}))

asyncio.run(main(*sys.argv[1:4], json.loads(sys.stdin.readline())))
"""


def _race_in_two_processes(spawn: tuple[str, str, str], stamps: list[float]) -> list[dict[str, Any]]:
    """Run RACER in two OS processes on the store `spawn` names, each given half the stamps, started
    together once both are connected; their reports."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, *spawn],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for index, process in enumerate(processes):
            assert process.stdin is not None
            assert process.stdout is not None
            process.stdin.write(json.dumps(stamps[index::2]) + "\n")
            process.stdin.flush()
            ready = process.stdout.readline()
            assert ready.strip() == "ready", process.communicate(timeout=60)[1]
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        reports = []
        for process in processes:
            stdout, stderr = process.communicate(timeout=120)
            assert process.returncode == 0, stderr
            reports.append(json.loads(stdout))
        return reports
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate(timeout=30)


@pytest.mark.slow
class TestRacingProcesses:
    """Two OS processes, each with many tasks, on one SQLite file or one Redis namespace."""

    async def test_racing_processes_keep_the_greatest_stamp_and_tags_with_their_bodies(
        self, persistent_backend: Backend
    ) -> None:
        backend = persistent_backend
        assert backend.spawn is not None
        stamps = _random_stamps(400)
        greatest = max(stamps)
        async with backend.open() as store:
            await store.save("k", _tagged("A", 0))
            reports = await anyio.to_thread.run_sync(_race_in_two_processes, backend.spawn, stamps)
            assert [report["inconsistent"] for report in reports] == [0, 0]
            assert all(greatest not in report["refused"] for report in reports)
            assert await store.load("hot") == _stamped(greatest)
            final = await store.load("k")
            assert final is not None
            assert _consistent(final)


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
    """The contract as a few lines of Python: an ordered dict whose order is the LRU order. A save with an
    earlier stamp than the live item's, and an update_meta whose if_tag or stamp does not pass, change
    nothing (not even the order)."""

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

    def _insert_and_say(self, key: str, value: Item) -> bool:
        self._insert(key, value)
        return key in self.items

    def save(self, key: str, value: Item) -> bool:
        self._purge()
        held = self.items.get(key)
        if held is not None and held.stamp > value.stamp:
            return False  # refused: not even a use
        self.items.pop(key, None)
        return self._insert_and_say(key, value)

    def update_meta(
        self, key: str, meta: dict[str, object], expires_at: float | None, if_tag: str | None, stamp: float | None
    ) -> bool:
        self._purge()
        old = self.items.get(key)
        if old is None or (if_tag is not None and old.tag != if_tag) or (stamp is not None and old.stamp > stamp):
            return False
        del self.items[key]
        new_stamp = old.stamp if stamp is None else stamp
        kept = Item(meta, old.body, old.group, old.created_at, expires_at, old.tag, new_stamp)
        self._insert(key, dataclasses.replace(kept, server=old.server, tool=old.tool))
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

    def remove_matching(self, match: Match) -> int:
        return self._remove_where(lambda value: match.matches(value.group, value.server, value.tool))

    def listing(self, match: Match) -> list[tuple[str, Item, int]]:
        """(key, item without its body, size) of every live item `match` covers, by key."""
        self._purge()
        chosen = [(k, v) for k, v in self.items.items() if match.matches(v.group, v.server, v.tool)]
        return sorted((k, dataclasses.replace(v, body=b""), v.size) for k, v in chosen)

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
_TAGS = st.sampled_from([None, "t1", "t2"])
_SERVERS = st.sampled_from(["", "s1", "s2"])
_TOOLS = st.sampled_from(["", "read", "write"])
_STAMPS = st.integers(0, 3).map(float)  # few values: equal, earlier and later stamps all come up
_CAPS = st.sampled_from([0, 7, 16, 17, 33, 34, 35, 53, 54, 55, 100])
_BOUNDS = st.sampled_from([17, 27, 37, 44, 53, 54, 55, 64, 81, 100, 150])


def _operations() -> st.SearchStrategy[list[tuple[Any, ...]]]:
    ttl = st.one_of(st.none(), st.integers(1, 3)).map(lambda value: value if value != 3 else None)
    by_kind: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
        "save": st.tuples(
            st.just("save"),
            _KEYS,
            st.sampled_from(_GROUPS),
            _BODY_SIZES,
            st.integers(0, 3),
            _TAGS,
            _STAMPS,
            _SERVERS,
            _TOOLS,
            ttl,
        ),
        "load": st.tuples(st.just("load"), _KEYS),
        "trim_group": st.tuples(st.just("trim_group"), st.sampled_from(_GROUPS), _CAPS),
        "update_meta": st.tuples(
            st.just("update_meta"), _KEYS, st.sampled_from([0, 10, 20]), _TAGS, st.none() | _STAMPS, ttl
        ),
        "remove": st.tuples(st.just("remove"), _KEYS),
        "remove_group": st.tuples(st.just("remove_group"), st.sampled_from(_GROUPS)),
        "remove_matching": st.tuples(
            st.just("remove_matching"), st.sampled_from(_GROUPS), st.none() | _SERVERS, st.none() | _TOOLS
        ),
        "remove_created_before": st.tuples(
            st.just("remove_created_before"), st.sampled_from(["", "conv:", "conv:1", "t"]), st.integers(0, 1)
        ),
        "advance": st.tuples(st.just("advance"), st.integers(1, 2)),
    }
    # Weighted towards building state and reordering it; the destructive operations are rarer.
    weights = {"save": 8, "load": 5, "trim_group": 2, "update_meta": 3}
    kinds = [kind for kind in by_kind for _ in range(weights.get(kind, 1))]
    return st.lists(st.sampled_from(kinds).flatmap(by_kind.__getitem__), min_size=10, max_size=60)


def _timeless(operation: tuple[Any, ...]) -> tuple[Any, ...]:
    return (*operation[:-1], None) if operation[0] in ("save", "update_meta") else operation


_OPERATIONS = _operations()
_LIMITS = st.builds(StoreLimits, max_bytes=st.none() | _BOUNDS, max_items=st.none() | st.integers(2, 5))


@pytest.mark.slow
class TestAgainstAModel:
    """For all operation sequences and bounds, a store answers exactly as the model does.

    The memory store is cheap, so it gets the most examples; the others share its generator and bugs
    in the logic they each reimplement (SQL, Lua) need fewer to show up.
    """

    @settings(max_examples=300, deadline=None)
    @given(operations=_OPERATIONS, limits=_LIMITS)
    async def test_memory(self, operations: list[tuple[Any, ...]], limits: StoreLimits) -> None:
        await _agrees_with_the_model(memory_backend(), operations, limits)

    @settings(max_examples=120, deadline=None)
    @given(operations=_OPERATIONS, limits=_LIMITS)
    async def test_sqlite(self, operations: list[tuple[Any, ...]], limits: StoreLimits) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            await _agrees_with_the_model(sqlite_backend(Path(scratch) / "cache.db"), operations, limits)

    @pytest.mark.redis
    @settings(max_examples=120, deadline=None)
    @given(operations=_OPERATIONS, limits=_LIMITS)
    async def test_redis(self, redis_url: str, operations: list[tuple[Any, ...]], limits: StoreLimits) -> None:
        # Redis keeps its own time: its sequences leave time out, and the model's clock stands still.
        timeless = [_timeless(operation) for operation in operations if operation[0] != "advance"]
        await _agrees_with_the_model(redis_backend(redis_url), timeless, limits)

    @pytest.mark.redis
    @settings(max_examples=6, deadline=None)  # each usage() asks all 16 shards: few examples, still seconds
    @given(operations=_OPERATIONS, limits=_LIMITS)
    async def test_redis_cluster(
        self, redis_cluster_url: str, operations: list[tuple[Any, ...]], limits: StoreLimits
    ) -> None:
        # The same script shard by shard, with the bounds and the group trims enforced across shards.
        timeless = [_timeless(operation) for operation in operations if operation[0] != "advance"]
        await _agrees_with_the_model(redis_backend(redis_cluster_url, "redis-cluster"), timeless, limits)

    @pytest.mark.redis
    @settings(max_examples=15, deadline=None)  # the same script as on Redis, which gets 120
    @given(operations=_OPERATIONS, limits=_LIMITS)
    async def test_valkey(self, valkey_url: str, operations: list[tuple[Any, ...]], limits: StoreLimits) -> None:
        timeless = [_timeless(operation) for operation in operations if operation[0] != "advance"]
        await _agrees_with_the_model(redis_backend(valkey_url, "valkey"), timeless, limits)


async def _agrees_with_the_model(backend: Backend, operations: list[tuple[Any, ...]], limits: StoreLimits) -> None:
    model = ModelStore(limits, backend.now if backend.clock is not None else lambda: 0.0)
    async with backend.open(limits) as store:
        for step, operation in enumerate(operations):
            await _apply(store, model, backend, operation, step)
            for group in [None, *_GROUPS]:
                assert await store.usage(group) == model.usage(group), (operation, group)
        # A few listings per sequence: a group, a server and a tool in another, both in a third.
        for match in (Match("conv:1"), Match("", "s1"), Match("conv:2", "s2", "write")):
            listed = sorted([(e.key, e.item, e.size) async for e in store.entries(match, page_size=2)])
            assert listed == model.listing(match), match
        counted = model.listing(Match("", tool="read"))
        assert await store.count(Match("", tool="read")) == Usage(len(counted), sum(size for *_, size in counted))
        for key in ["a", "b", "c", "d", "e", "f"]:
            loaded = await store.load(key)
            assert loaded == model.load(key), key
            assert loaded is None or loaded.checksum == body_checksum(loaded.body), key
        await store.remove_all()


async def _apply(store: Store, model: ModelStore, backend: Backend, operation: tuple[Any, ...], step: int) -> None:
    now = backend.now() if backend.clock is not None else 0.0
    match operation:
        case ("save", key, group, body_size, created, tag, stamp, server, tool, ttl):
            expires_at = None if ttl is None else now + ttl
            value = Item(
                {"v": step % 10}, b"b" * body_size, group, float(created), expires_at, tag, stamp, "", server, tool
            )
            assert await store.save(key, value) == model.save(key, value), operation
        case ("load", key):
            assert await store.load(key) == model.load(key), operation
        case ("update_meta", key, pad, if_tag, stamp, ttl):
            meta: dict[str, object] = {"v": step % 10, "pad": "p" * pad}
            expires_at = None if ttl is None else now + ttl
            updated = await store.update_meta(key, meta, expires_at, if_tag=if_tag, stamp=stamp)
            assert updated == model.update_meta(key, meta, expires_at, if_tag, stamp), operation
        case ("remove", key):
            await store.remove(key)
            model.remove(key)
        case ("remove_group", group):
            assert await store.remove_group(group) == model.remove_group(group), operation
        case ("remove_matching", group, server, tool):
            match = Match(group, server, tool)
            assert await store.remove_matching(match) == model.remove_matching(match), operation
        case ("trim_group", group, max_bytes):
            assert await store.trim_group(group, max_bytes) == model.trim_group(group, max_bytes), operation
        case ("remove_created_before", prefix, before):
            assert await store.remove_created_before(prefix, before) == model.remove_created_before(prefix, before)
        case ("advance", seconds):
            assert backend.clock is not None
            backend.clock.advance(seconds)
        case _:
            raise AssertionError(f"unknown operation {operation!r}")
