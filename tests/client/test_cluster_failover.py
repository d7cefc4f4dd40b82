"""The tool cache on a Redis Cluster of 3 primaries and 3 replicas when a primary dies (SIGKILL).

Replication is asynchronous: a primary can acknowledge a write and die before its replica has it, and the
promoted replica then lacks it. When the lost write is a freshness mark (a mutating call ended its server's
entries), an entry stored before it would look fresh: the store notes which process serves each shard, and
an entry whose freshness was granted before a failover is revalidated, never served fresh. The first test
loses a mark on purpose; the second kills a primary under reads and writes of two caches (two processes'
worth: neither knows the other's marks) and checks every answer. Bounds here are behaviour with generous
margins; benchmarks/cluster_failover.py measures the seconds.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import mcp_types as mt
import pytest
import redis
from fastmcp import FastMCP
from support.redis_server import Frozen, RedisCluster, redis_server_binary
from support.transports import MODERN, ServerTarget

from mcpcache.client import ToolCache
from mcpcache.client.entries import MARKS_GROUP
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.stores import RedisStore
from mcpcache.stores.items import Match

from .harness import Conn, connect

pytestmark = [pytest.mark.anyio, pytest.mark.redis, pytest.mark.slow]

SERVER_ID = "docs"
RECOVERY_S = 40.0
"""Generous bound for fresh hits to come back after a kill (the issue's target is 20 s; the benchmark measures)."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    with RedisCluster(redis_server_binary(), tmp_path / "cluster", primaries=3, replicas=1) as started:
        yield started


def docs_server(docs: dict[str, int]) -> FastMCP:
    """`read` (fresh for 10 minutes: only a freshness end can make it stale here) and `edit` (mutating)."""
    from mcpcache.server.fastmcp import install

    server = FastMCP("docs")

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=True))
    def read(key: str) -> dict[str, Any]:
        return {"key": key, "version": docs.get(key, 0)}

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=False, destructive_hint=True))
    def edit(key: str) -> str:
        docs[key] = docs.get(key, 0) + 1
        return "edited"

    install(server, ToolPolicies({"read": CachePolicy(ttl_ms=600_000)}))
    return server


def cluster_store(cluster: RedisCluster, namespace: str) -> RedisStore:
    # Generous timeouts: the test is about what is answered, not how fast (the defaults are for production).
    return RedisStore(cluster.url, namespace=namespace, socket_timeout_s=2.0, connect_timeout_s=2.0, cooldown_s=0.5)


def version_of(result: mt.CallToolResult) -> int:
    assert not result.is_error, result
    assert result.structured_content is not None
    return int(result.structured_content["version"])


async def test_a_freshness_mark_lost_in_a_failover_is_taken_as_lost(cluster: RedisCluster) -> None:
    docs: dict[str, int] = {}
    server = docs_server(docs)
    async with cluster_store(cluster, "lost") as store_a, cluster_store(cluster, "lost") as store_b:
        writer, reader = ToolCache(store_a), ToolCache(store_b)
        async with (
            connect("mcp", ServerTarget.memory(server), MODERN, writer, server_id=SERVER_ID) as a,
            connect("mcp", ServerTarget.memory(server), MODERN, reader, server_id=SERVER_ID) as b,
        ):
            await a.call("edit", {"key": "k"})  # the server's freshness mark, to learn where it lives
            (mark,) = [entry.key async for entry in store_a.entries(Match(MARKS_GROUP))]
            mark_key = store_a.item_key(mark)
            assert version_of((await b.call("read", {"key": "k"})).result) == 1
            assert (await b.call("read", {"key": "k"})).outcome.status == "fresh_hit"

            primary, replica = (await anyio.to_thread.run_sync(cluster.wait_serving, mark_key))[:2]
            first_end = await store_a.client.hget(mark_key, "m")
            # The replica hears nothing more: stopped, and its link cut (what was on the wire already stays
            # in its socket). The primary acknowledges the next mark, and dies before anyone has it.
            with Frozen(replica):
                direct = redis.Redis(host="127.0.0.1", port=primary.port, socket_timeout=5)
                direct.client_kill_filter(_type="replica")
                direct.close()
                await a.call("edit", {"key": "k"})
                assert await store_a.client.hget(mark_key, "m") != first_end  # acknowledged by the primary
                primary.kill()
            await anyio.to_thread.run_sync(cluster.wait_served_by, mark_key, replica)
            # The write is lost: the promoted replica holds the first mark, which the stored entry postdates.
            assert await _eventually(lambda: store_b.client.hget(mark_key, "m")) == first_end

            # The reader never serves its stored answer fresh: it is revalidated, and the server has moved on.
            deadline = time.monotonic() + RECOVERY_S
            while True:
                call = await b.call("read", {"key": "k"})
                assert call.outcome.status != "fresh_hit" or version_of(call.result) == 2, call.outcome
                if version_of(call.result) == 2:
                    break
                assert call.outcome.status == "miss", call.outcome  # only a failing store makes a call miss
                assert time.monotonic() < deadline, "the store never answered after the failover"
                await anyio.sleep(0.2)
            assert (await b.call("read", {"key": "k"})).outcome.status == "fresh_hit"


async def _eventually(read: Any, within_s: float = RECOVERY_S) -> Any:
    """What `read()` returns once the store answers again (it fails while the client learns the new primary)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return await read()
        except redis.exceptions.RedisError:
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(0.2)


async def test_a_primary_killed_under_reads_and_writes_costs_no_wrong_answer_and_no_failed_call(
    cluster: RedisCluster,
) -> None:
    docs: dict[str, int] = {}
    server = docs_server(docs)
    keys = [f"doc-{n}" for n in range(12)]
    completed: dict[str, int] = {}
    """The version each key's last finished edit made: a read that starts after it must see it at least."""
    wrong: list[str] = []
    failed: list[str] = []
    fresh_after_kill: list[float] = []
    fresh_again = anyio.Event()
    killed_at: list[float] = []
    async with cluster_store(cluster, "traffic") as store_a, cluster_store(cluster, "traffic") as store_b:
        caches = [ToolCache(store_a), ToolCache(store_b)]
        async with (
            connect("mcp", ServerTarget.memory(server), MODERN, caches[0], server_id=SERVER_ID) as a,
            connect("mcp", ServerTarget.memory(server), MODERN, caches[1], server_id=SERVER_ID) as b,
        ):
            stop = anyio.Event()

            async def reader(conn: Conn, seed: int) -> None:
                pick = random.Random(seed)
                while not stop.is_set():
                    key = pick.choice(keys)
                    before = completed.get(key, 0)
                    after_kill = bool(killed_at)  # only a call begun after the kill tells of the failover
                    try:
                        call = await conn.call("read", {"key": key})
                    except Exception as exc:  # a failed call: what the cache must never cause
                        failed.append(repr(exc))
                        continue
                    after = docs.get(key, 0)
                    got = version_of(call.result)
                    if not before <= got <= after:
                        wrong.append(f"{key}: {got} outside [{before}, {after}] ({call.outcome.status})")
                    if after_kill and call.outcome.status == "fresh_hit" and not fresh_after_kill:
                        fresh_after_kill.append(time.monotonic() - killed_at[0])
                        fresh_again.set()
                    await anyio.lowlevel.checkpoint()

            async def writer(conn: Conn) -> None:
                pick = random.Random(7)
                while not stop.is_set():
                    key = pick.choice(keys)
                    try:
                        await conn.call("edit", {"key": key})
                    except Exception as exc:
                        failed.append(repr(exc))
                    completed[key] = docs[key]
                    await anyio.sleep(0.05)

            async with anyio.create_task_group() as tasks:
                for seed, conn in enumerate([a, b, a, b]):
                    tasks.start_soon(reader, conn, seed)
                tasks.start_soon(writer, a)
                await anyio.sleep(1.5)
                # The primary serving the server's freshness mark: every lookup reads it.
                (mark,) = [entry.key async for entry in store_a.entries(Match(MARKS_GROUP))]
                victim = cluster.serving(store_a.item_key(mark))[0]
                victim.kill()
                killed_at.append(time.monotonic())
                with anyio.move_on_after(RECOVERY_S):
                    await fresh_again.wait()
                await anyio.sleep(1.0)  # traffic goes on a while after fresh hits are back
                stop.set()
            print(f"\nfresh hits again {fresh_after_kill} s after the kill; store failures {caches[1].stats}")
    assert failed == []
    assert wrong == []
    assert fresh_after_kill, f"no fresh hit within {RECOVERY_S} s of the kill"
