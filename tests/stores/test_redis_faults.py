"""The Redis store when Redis misbehaves: frozen (SIGSTOP), bounded by `maxmemory`, its index evicted.

- A store op on a frozen server raises (it never hangs) within its socket timeout, then fails fast while
  its circuit is open, and works again after the cool-down once the server answers.
- Under `maxmemory` with `volatile-lru` or `allkeys-lru`, Redis's memory stays under its cap, an item saved
  and loaded straight back loads, and `usage()` is what is really held.
- An index key evicted from under the store (as an `allkeys-*` policy may) is rebuilt or dropped, and the
  items held still load.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from typing import Any

import anyio
import pytest
import redis.asyncio
import redis.exceptions
from support.redis_server import Frozen, RedisServer, used_memory

from mcpcache.stores import Item, Match, RedisStore, Usage
from mcpcache.stores.redis import RedisUnavailable

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

MARGIN_S = 3.0

WHOLE = b"0 \xffwhole"
"""The directory's mark (field 0xFF, a name no UTF-8 item key takes) once every item held has an entry."""


async def test_a_store_op_on_a_frozen_redis_raises_then_the_circuit_fails_fast(
    own_redis_server: RedisServer,
) -> None:
    async with RedisStore(own_redis_server.url, namespace="frozen", socket_timeout_s=0.3, cooldown_s=1.0) as store:
        await store.save("k", Item({}, b"body", "g"))
        with Frozen(own_redis_server):
            started = time.monotonic()
            with pytest.raises(redis.exceptions.TimeoutError):
                await store.load("k")
            assert time.monotonic() - started < 0.3 + MARGIN_S
            assert store.circuit_open
            for attempt in (store.load("k"), store.save("k", Item({}, b"x", "g")), store.usage(), store.remove_all()):
                with pytest.raises(RedisUnavailable):  # not asked: no socket wait at all
                    await attempt
        await anyio.sleep(1.1)  # the cool-down, with the server thawed
        assert not store.circuit_open
        assert await store.load("k") == Item({}, b"body", "g")


async def test_a_large_save_on_a_frozen_redis_waits_for_its_length_then_the_circuit_fails_fast(
    own_redis_server: RedisServer,
) -> None:
    body = b"x" * 20_000_000
    async with RedisStore(own_redis_server.url, namespace="frozen", socket_timeout_s=0.3, cooldown_s=1.0) as store:
        assert await store.save("small", Item({}, b"body", "g"))  # the eviction policy is read once, now
        with Frozen(own_redis_server):
            started = time.monotonic()
            with pytest.raises(redis.exceptions.TimeoutError, match=r"within 1\.3 s"):  # 0.3 s, and 0.05 s per MB
                await store.save("large", Item({}, body, "g"))
            assert time.monotonic() - started < 1.3 + MARGIN_S
            assert store.circuit_open
            with pytest.raises(RedisUnavailable):
                await store.load("large")
        await anyio.sleep(1.1)
        assert await store.save("large", Item({}, body, "g"))
        loaded = await store.load("large")
        assert loaded is not None
        assert loaded.body == body


def test_a_budget_per_mb_is_a_number_of_seconds() -> None:
    for bad in (-1, float("inf"), True, "0.05"):
        with pytest.raises(ValueError, match="seconds_per_mb"):
            RedisStore("redis://127.0.0.1:1/0", seconds_per_mb=bad)  # type: ignore[arg-type]


async def test_a_killed_redis_fails_fast_and_recovers(own_redis_server: RedisServer) -> None:
    async with RedisStore(own_redis_server.url, namespace="killed") as store:
        await store.save("k", Item({}, b"body", "g"))
        own_redis_server.kill()
        started = time.monotonic()
        for _ in range(5):
            with pytest.raises(redis.exceptions.ConnectionError):
                await store.load("k")
        assert time.monotonic() - started < MARGIN_S
        assert not store.circuit_open  # a refused connection is not a stall
        own_redis_server.start()
        assert await store.load("k") is None  # no persistence: a fresh, empty server
        await store.save("k", Item({}, b"body", "g"))
        assert await store.load("k") == Item({}, b"body", "g")


async def _held(client: redis.asyncio.Redis, namespace: str) -> Usage:
    """What the namespace really holds, counted underneath the store."""
    items = held = 0
    async for name in client.scan_iter(match="{" + namespace + "}:i:*", count=1000):
        items += 1
        held += int(await client.hstrlen(name, "b")) + int(await client.hstrlen(name, "m"))
    return Usage(items, held)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["volatile-lru", "allkeys-lru"])
async def test_maxmemory_keeps_the_cache_working_and_memory_under_the_cap(
    own_redis_server: RedisServer, policy: str
) -> None:
    cap = 16 * 1024 * 1024
    client = redis.asyncio.Redis.from_url(own_redis_server.url)
    await client.config_set("maxmemory", cap)
    await client.config_set("maxmemory-policy", policy)
    namespace = f"mm-{uuid.uuid4().hex[:8]}"
    rnd = random.Random(7)
    written = 0
    peak = 0
    try:
        async with RedisStore(own_redis_server.url, namespace=namespace) as store:
            for i in range(6000):
                # 4-16 KB bodies, half with an expiry of their own (tool answers), half without (references).
                body = os.urandom(rnd.randint(2048, 8192)).hex().encode()
                expires_at = time.time() + 3600 if i % 2 else None
                item = Item({"i": i}, body, f"g{i % 4}", float(i), expires_at)
                assert await store.save(f"k{i}", item)
                assert await store.load(f"k{i}") == item  # saved and loaded straight back
                written += item.size
                if i % 250 == 0:
                    used, maxmemory = used_memory(own_redis_server.port)
                    assert maxmemory == cap
                    peak = max(peak, used)
            used, _ = used_memory(own_redis_server.port)
            peak = max(peak, used)
            # Counting underneath takes commands of its own, and each may make Redis evict again: lift the
            # cap first, so both counts see the same items.
            await client.config_set("maxmemory", 0)
            usage = await store.usage()
            held = await _held(client, namespace)
            groups = [await store.usage(f"g{n}") for n in range(4)]
            print(
                f"\n{policy}: wrote {written / 2**20:.1f} MB in 6000 saves; used_memory peak {peak / 2**20:.2f} MB, "
                f"end {used / 2**20:.2f} MB (cap {cap / 2**20:.0f} MB); usage {usage}, held {held}"
            )
            assert written > 3 * cap  # Redis really had to evict
            # Redis evicts before each command until used_memory is back under maxmemory; one command's own
            # writes (one save script: a 16 KB item and its index entries) may go past it until the next.
            assert peak <= cap + 64 * 1024
            assert usage == held  # usage() walks its index first: exactly what is held
            assert Usage(sum(g.items for g in groups), sum(g.bytes for g in groups)) == usage
            assert usage.items > 100  # and the cache still holds a useful amount
    finally:
        await client.aclose()


async def test_items_held_when_the_directory_was_evicted_are_counted_again(redis_url: str) -> None:
    namespace = f"dir-{uuid.uuid4().hex[:8]}"
    prefix = "{" + namespace + "}:"
    async with RedisStore(redis_url, namespace=namespace) as store:
        items = {f"k{i}": Item({"i": i}, b"body %d" % i, f"g{i % 2}", float(i)) for i in range(10)}
        for key, item in items.items():
            await store.save(key, item)
        await store.client.delete(prefix + "d")  # as an allkeys-* eviction would
        late = Item({"i": 10}, b"late", "g0", 10.0)
        await store.save("k10", late)  # finds the directory gone: the old items are no longer indexed
        items["k10"] = late
        total = Usage(len(items), sum(item.size for item in items.values()))
        assert await store.usage() == total
        assert await store.usage("g1") == Usage(5, sum(items[f"k{i}"].size for i in range(1, 10, 2)))
        assert await store.client.hget(prefix + "d", b"\xff") == WHOLE  # found: the next count scans nothing
        assert await store.usage() == total


_BOOKKEEPING = ("d", "u", "lru", "x", "groups", "g:g0", "g:g1", "c:g0", "c:g1", "tick", "sweep")
"""Every key of a namespace's index and counters (items aside) that an `allkeys-*` policy may evict."""


def _subsets(names: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [tuple(name for bit, name in enumerate(names) if mask >> bit & 1) for mask in range(1 << len(names))]


async def _counted_namespace(store: RedisStore) -> dict[str, Item]:
    """Six items in two groups, half with an expiry, counted once (the steady state an eviction strikes)."""
    items = {
        f"k{i}": Item({"i": i}, b"body %d" % i, f"g{i % 2}", float(i), time.time() + 3600 if i % 2 else None)
        for i in range(6)
    }
    for key, item in items.items():
        assert await store.save(key, item)
    assert await store.usage() == Usage(6, sum(item.size for item in items.values()))
    return items


async def _assert_counts_what_is_held(store: RedisStore, client: redis.asyncio.Redis, why: object) -> None:
    held = await _held(client, store.namespace)
    usage = await store.usage()
    assert usage == held, why
    groups = [await store.usage(group) for group in ("g0", "g1")]
    assert Usage(sum(g.items for g in groups), sum(g.bytes for g in groups)) == held, why
    assert await store.usage() == held, why  # and again, now that nothing is missing


async def test_usage_counts_what_is_held_whichever_bookkeeping_keys_were_evicted(
    own_redis_server: RedisServer,
) -> None:
    """Every combination of the index keys an `allkeys-*` policy may evict at once, right before a count."""
    client = redis.asyncio.Redis.from_url(own_redis_server.url)
    try:
        async with RedisStore(own_redis_server.url, namespace="evicted") as store:
            prefix = "{evicted}:"
            for evicted in _subsets(_BOOKKEEPING):
                await client.flushdb()
                items = await _counted_namespace(store)
                if evicted:
                    await client.delete(*(prefix + name for name in evicted))
                await _assert_counts_what_is_held(store, client, evicted)
                assert await store.load("k3") == items["k3"], evicted
    finally:
        await client.aclose()


async def test_usage_counts_what_is_held_when_evictions_strike_before_and_after_an_operation(
    own_redis_server: RedisServer,
) -> None:
    """Keys evicted, an operation that meets their absence (a load and a save), more keys evicted, a count:
    whatever the store noted about the first loss must not go with the second."""
    client = redis.asyncio.Redis.from_url(own_redis_server.url)
    try:
        async with RedisStore(own_redis_server.url, namespace="evicted") as store:
            prefix = "{evicted}:"
            for first in _subsets(("d", "u", "lru", "groups", "g:g0", "c:g1")):
                for then in _subsets(("d", "u", "lru", "groups")):
                    await client.flushdb()
                    items = await _counted_namespace(store)
                    if first:
                        await client.delete(*(prefix + name for name in first))
                    assert await store.load("k0") == items["k0"]
                    assert await store.save("late", Item({}, b"late", "g1", 10.0))
                    if then:
                        await client.delete(*(prefix + name for name in then))
                    await _assert_counts_what_is_held(store, client, (first, then))
    finally:
        await client.aclose()


async def test_a_namespace_emptied_by_its_own_removals_keeps_its_mark(redis_url: str) -> None:
    """Redis deletes a hash left empty, but a counted namespace's directory holds its mark as well: emptied by
    its own removals, it is still known to index every item held, and no later count scans the keyspace."""
    namespace = f"empty-{uuid.uuid4().hex[:8]}"
    prefix = "{" + namespace + "}:"
    async with RedisStore(redis_url, namespace=namespace) as store:
        for key in ("a", "b"):
            await store.save(key, Item({"k": key}, b"body", "g", 1.0))
        assert await store.client.hget(prefix + "d", b"\xff") is None  # never counted: not known whole
        assert await store.usage() == Usage(2, 2 * (len(b"body") + len(b'{"k":"a"}')))
        for key in ("a", "b"):
            await store.remove(key)
        assert await store.client.hgetall(prefix + "d") == {b"\xff": WHOLE}
        assert await store.usage() == Usage(0, 0)
        assert await store.count(Match("g")) == Usage(0, 0)
        assert (await store.list_page(Match(""))).entries == ()


async def test_a_directory_evicted_while_usage_scans_for_items_is_scanned_again(redis_url: str) -> None:
    """The scan that indexes the items held again counts only if the directory was not evicted under it
    (then the items it indexed went with it): the count scans again."""
    evictions = [2]

    class EvictedMidScan(RedisStore):
        async def _call(self, shard: int, op: str, *args: bytes | str | int, moving: int = 0) -> Any:
            reply = await super()._call(shard, op, *args, moving=moving)
            if op == "adopt" and evictions[0]:
                evictions[0] -= 1
                await self.client.delete(prefix + "d", prefix + "u")  # as an allkeys-* eviction would
            return reply

    namespace = f"mid-{uuid.uuid4().hex[:8]}"
    prefix = "{" + namespace + "}:"
    async with EvictedMidScan(redis_url, namespace=namespace) as store:
        items = {f"k{i}": Item({"i": i}, b"body %d" % i, f"g{i % 2}", float(i)) for i in range(10)}
        for key, item in items.items():
            await store.save(key, item)
        assert await store.usage() == Usage(10, sum(item.size for item in items.values()))
        assert evictions == [0]
        assert await store.client.hget(prefix + "d", b"\xff") == WHOLE
        await store.remove_all()


async def test_an_evicted_index_key_is_rebuilt_or_dropped(redis_url: str) -> None:
    namespace = f"idx-{uuid.uuid4().hex[:8]}"
    prefix = "{" + namespace + "}:"
    async with RedisStore(redis_url, namespace=namespace) as store:
        items = {f"k{i}": Item({"i": i}, b"body %d" % i, f"g{i % 2}", float(i)) for i in range(10)}
        for key, item in items.items():
            await store.save(key, item)
        total = Usage(10, sum(item.size for item in items.values()))

        for evicted in ("u", "lru", "groups", "g:g0", "c:g1"):
            await store.client.delete(prefix + evicted)  # as an allkeys-* eviction would
            assert await store.usage() == total, evicted
            assert await store.load("k3") == items["k3"]

        assert await store.trim_group("g0", 0) == 5
        assert await store.remove_created_before("g1", 5.0) == 2  # k1 and k3 were created before 5
        assert await store.usage() == Usage(3, sum(items[k].size for k in ("k5", "k7", "k9")))

        # The directory itself: the rest of the index is dropped; the next count indexes the items held again.
        await store.client.delete(prefix + "d")
        held = Usage(3, sum(items[k].size for k in ("k5", "k7", "k9")))
        assert await store.usage() == held
        assert await store.load("k5") == items["k5"]
        assert await store.usage("g1") == held
        await store.remove_all()


async def test_an_idle_expiry_under_a_volatile_policy(own_redis_server: RedisServer) -> None:
    client = redis.asyncio.Redis.from_url(own_redis_server.url)
    try:
        async with RedisStore(own_redis_server.url, namespace="idle") as store:
            await store.save("plain", Item({}, b"body"))
            assert await client.pttl(store.item_key("plain")) == -1  # no maxmemory policy asking for one
        await client.config_set("maxmemory-policy", "volatile-lru")
        async with RedisStore(own_redis_server.url, namespace="idle") as store:
            await store.save("idle", Item({}, b"body"))
            assert 0 < await client.pttl(store.item_key("idle")) <= 30 * 24 * 3600 * 1000
            await store.load("plain")  # a use gives an item the idle expiry too
            assert await client.pttl(store.item_key("plain")) > 0
        async with RedisStore(own_redis_server.url, namespace="idle", idle_ttl_s=None) as store:
            await store.save("never", Item({}, b"body"))
            assert await client.pttl(store.item_key("never")) == -1
    finally:
        await client.aclose()
