"""What the Redis store adds on a Redis Cluster, beyond the contract every store keeps (test_contract.py runs
it on the session's 3-primary cluster): a namespace spreads over the primaries, a `RedisCluster` client of
the caller's own is taken, cluster URLs are read, and a server process taking over a shard is noted.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

import anyio
import anyio.to_thread
import mcp_types as mt
import pytest
import redis
import redis.asyncio
from fastmcp import Client, FastMCP
from redis.asyncio.cluster import RedisCluster
from support.redis_server import RedisServer, redis_server_binary

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.stores import Item, RedisStore, Usage
from mcpcache.stores.items import Match
from mcpcache.stores.redis_shards import CLUSTER_SHARDS, parse_cluster_url, redis_url_kind, shard_prefixes

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


def test_cluster_urls_are_read_and_others_refused_in_one_line() -> None:
    parsed = parse_cluster_url("rediss+cluster://app:s%40cret@10.0.0.1:7000,[::1]:7001,cache-3")
    assert parsed.ssl
    assert (parsed.username, parsed.password) == ("app", "s@cret")
    assert parsed.nodes == (("10.0.0.1", 7000), ("::1", 7001), ("cache-3", 6379))
    assert parse_cluster_url("redis+cluster://127.0.0.1:7000/0").nodes == (("127.0.0.1", 7000),)
    assert [redis_url_kind(u) for u in ("redis://h", "unix:///tmp/r.sock", "redis+cluster://h:1")] == [
        "single",
        "single",
        "cluster",
    ]
    for bad in ("http://127.0.0.1:6379", "redis+cluster://h:x", "redis+cluster://h:1/3", "cluster://h:1"):
        with pytest.raises(ValueError, match="Redis") as refused:
            RedisStore(bad)
        assert "\n" not in str(refused.value)
        assert len(str(refused.value)) < 200


def test_each_shard_of_a_namespace_has_a_slot_of_its_own_spread_over_the_slots() -> None:
    from redis.crc import key_slot

    slots = [key_slot(prefix.encode()) for prefix in shard_prefixes("mcpcache", CLUSTER_SHARDS)]
    assert [slot * CLUSTER_SHARDS // 16384 for slot in slots] == list(range(CLUSTER_SHARDS))
    assert shard_prefixes("mcpcache", 1) == ("{mcpcache}:",)  # one Redis: the layout of earlier versions


async def test_a_namespace_spreads_over_every_primary(redis_cluster_url: str) -> None:
    """300 answers written by one tool cache: each of the 3 primaries holds at least 15 % of them."""
    server = FastMCP("spread")

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=True))
    def read(key: str) -> str:
        return f"answer {key}"

    install(server, ToolPolicies({"read": CachePolicy(ttl_ms=600_000)}))
    namespace = f"spread-{uuid.uuid4().hex[:8]}"
    async with RedisStore(redis_cluster_url, namespace=namespace, socket_timeout_s=10.0) as store:
        cache = ToolCache(store, CacheSettings(store_deadline_s=30.0))  # about where answers land, not how fast
        async with Client(server) as client:
            view = cache.wrap(client)
            for n in range(300):
                assert (await view.call_mcp("read", {"key": str(n)})).outcome.status == "miss"
        assert (await store.usage("tools")).items == 300
        assert isinstance(store.client, RedisCluster)
        held: Counter[str] = Counter()
        for node in store.client.get_primaries():
            async for _ in store.client.scan_iter(match="{" + namespace + "/*}:i:*", target_nodes=node):
                held[node.name] += 1
        shares = {node: count / 300 for node, count in held.items()}
        print(f"\nitems per primary: {dict(held)}")
        assert len(shares) == 3, shares
        assert all(share >= 0.15 for share in shares.values()), shares
        await store.remove_all()
        assert await store.usage() == Usage(0, 0)


async def test_a_cluster_client_of_ones_own_is_used_and_left_open(redis_cluster_url: str) -> None:
    nodes = [redis.asyncio.cluster.ClusterNode(host, port) for host, port in parse_cluster_url(redis_cluster_url).nodes]
    client = RedisCluster(startup_nodes=nodes)
    try:
        async with RedisStore(client, namespace=f"own-{uuid.uuid4().hex[:8]}") as store:
            assert store.shards == CLUSTER_SHARDS
            for key in ("a", "b", "c", "d"):
                assert await store.save(key, Item({"k": key}, key.encode(), "g"))
            assert [item.body if item else None for item in await store.load_many(["a", "d", "x"])] == [
                b"a",
                b"d",
                None,
            ]
            assert (await store.count(Match("g"))).items == 4
            await store.remove_all()
        assert await client.ping()  # the caller's client stays open
        decoding = RedisCluster(startup_nodes=nodes, decode_responses=True)
        with pytest.raises(ValueError, match="decode_responses"):
            RedisStore(decoding)
        await decoding.aclose()
    finally:
        await client.aclose()


def replicated(follower: redis.Redis, key: str) -> None:
    """Wait until the replica is linked and holds `key` (a behaviour, within a generous deadline)."""
    deadline = time.monotonic() + 30
    while follower.info("replication").get("master_link_status") != "up" or not follower.exists(key):
        assert time.monotonic() < deadline, "the replica never caught up"
        time.sleep(0.05)


async def test_a_promoted_replica_is_noted_as_a_moment_writes_may_have_been_lost(tmp_path: Path) -> None:
    """A replica promoted (as Sentinel or a cluster does it) has a new replication id: the store notes the
    moment it first reads from it, and `lost_before` says so for the keys it serves."""
    binary = redis_server_binary()
    folder = ("--dir", str(tmp_path))  # a replica writes what it receives to dump.rdb there, not in the cwd
    with RedisServer(binary, extra=folder) as primary, RedisServer(binary, extra=folder) as replica:
        follower = redis.Redis(host="127.0.0.1", port=replica.port, socket_timeout=5)
        follower.replicaof("127.0.0.1", primary.port)
        async with RedisStore(primary.url, namespace="epoch") as store:
            await store.peek_many(["mark"])
            assert store.lost_before(["mark"]) is None  # a new namespace on one Redis lost nothing
            await store.save("mark", Item({"endedAt": 1.0}, b"", "marks"))
            await anyio.to_thread.run_sync(replicated, follower, store.item_key("mark"))
        follower.replicaof("NO", "ONE")  # promoted: a new replication id
        before = time.time()
        async with RedisStore(replica.url, namespace="epoch") as store:
            (mark,) = await store.peek_many(["mark"])
            assert mark is not None
            lost = store.lost_before(["mark", "anything"])
            assert lost is not None
            assert before - 1 <= lost <= time.time() + 1
            await store.peek_many(["mark"])
            assert store.lost_before(["mark"]) == lost  # noted once: the same process serves it since
        follower.close()
