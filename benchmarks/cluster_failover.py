"""A Redis Cluster primary killed (SIGKILL) under reads and writes of two tool caches: wrong answers, failed
calls, and how long until the replica serves and fresh hits come back.

Each round starts a cluster of 3 primaries and 3 replicas (real redis-server processes on loopback ports,
`cluster-node-timeout` 1 s by default), a FastMCP server in this process with a read tool (fresh for 10
minutes, tagged) and a mutating edit tool, and two `ToolCache`s on their own `RedisStore`s in one namespace
(as two processes would be: neither knows the other's freshness ends but through the store). Four readers
and one writer (an edit every 50 ms) run; after `--warm` seconds the primary serving the server's freshness
mark is killed, so every lookup depends on the failover. A read is wrong when it returns an older version
than the last edit that had finished before the read began. Reported per round and as medians: seconds
from the kill until the replica serves the mark's slot (as the nodes agree), until the first fresh hit, the
reads that were misses because the store failed, and the wrong answers and failed calls (both must be 0).

Run:  python benchmarks/cluster_failover.py               (3 rounds: about a minute)
      python benchmarks/cluster_failover.py --rounds 1 --node-timeout-ms 2000
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import mcp_types as mt
from fastmcp import Client, FastMCP

from mcpcache.client import ToolCache
from mcpcache.client.entries import MARKS_GROUP
from mcpcache.processes import RedisCluster
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.stores import RedisStore
from mcpcache.stores.items import Match

KEYS = [f"doc-{n}" for n in range(12)]


def docs_server(docs: dict[str, int]) -> FastMCP:
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


async def one_round(binary: str, folder: Path, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    docs: dict[str, int] = {}
    completed: dict[str, int] = {}
    server = docs_server(docs)
    wrong = failed = 0
    store_misses_after_kill = 0
    killed_at: float | None = None
    fresh_after: float | None = None
    fresh_again = anyio.Event()
    with RedisCluster(binary, folder, primaries=3, replicas=1, node_timeout_ms=args.node_timeout_ms) as cluster:

        def store() -> RedisStore:
            return RedisStore(cluster.url, namespace="failover", socket_timeout_s=2.0, connect_timeout_s=2.0)

        async with store() as store_a, store() as store_b, Client(server) as client_a, Client(server) as client_b:
            cache_a, cache_b = ToolCache(store_a), ToolCache(store_b)
            views = [cache_a.wrap(client_a, server_id="docs"), cache_b.wrap(client_b, server_id="docs")]
            stop = anyio.Event()

            async def reader(view: Any, index: int) -> None:
                nonlocal wrong, failed, fresh_after, store_misses_after_kill
                pick = random.Random(seed * 10 + index)
                while not stop.is_set():
                    key = pick.choice(KEYS)
                    before = completed.get(key, 0)
                    after_kill = killed_at is not None  # only a call begun after the kill tells of the failover
                    try:
                        call = await view.call_mcp("read", {"key": key})
                    except Exception:
                        failed += 1
                        continue
                    if call.result.is_error or call.result.structured_content["version"] < before:
                        wrong += 1
                    status = call.outcome.status
                    if after_kill and killed_at is not None:
                        if status == "fresh_hit" and fresh_after is None:
                            fresh_after = time.monotonic() - killed_at
                            fresh_again.set()
                        if status == "miss" and "store" in call.outcome.reason:
                            store_misses_after_kill += 1
                    await anyio.lowlevel.checkpoint()

            async def writer(view: Any) -> None:
                nonlocal failed
                pick = random.Random(seed)
                while not stop.is_set():
                    key = pick.choice(KEYS)
                    try:
                        await view.call_mcp("edit", {"key": key})
                    except Exception:
                        failed += 1
                    completed[key] = docs[key]
                    await anyio.sleep(0.05)

            async with anyio.create_task_group() as tasks:
                for index in range(4):
                    tasks.start_soon(reader, views[index % 2], index)
                tasks.start_soon(writer, views[0])
                await anyio.sleep(args.warm)
                (mark,) = [entry.key async for entry in store_a.entries(Match(MARKS_GROUP))]
                mark_key = store_a.item_key(mark)
                victim, replica = (await anyio.to_thread.run_sync(cluster.wait_serving, mark_key))[:2]
                victim.kill()
                killed_at = time.monotonic()
                served_after = await anyio.to_thread.run_sync(cluster.wait_served_by, mark_key, replica)
                with anyio.move_on_after(60):
                    await fresh_again.wait()
                await anyio.sleep(1.0)
                stop.set()
    return {
        "wrong": wrong,
        "failed": failed,
        "replica_serves_after_s": round(served_after, 2),
        "fresh_hits_after_s": None if fresh_after is None else round(fresh_after, 2),
        "store_misses_after_kill": store_misses_after_kill,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    rounds = []
    for seed in range(args.rounds):
        folder = Path(tempfile.mkdtemp(prefix="mcpcache-failover-"))
        try:
            rounds.append(await one_round(binary, folder, args, seed))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(f"round {seed + 1}/{args.rounds}: {rounds[-1]}", file=sys.stderr)
    fresh = [r["fresh_hits_after_s"] for r in rounds if r["fresh_hits_after_s"] is not None]
    return {
        "node_timeout_ms": args.node_timeout_ms,
        "rounds": rounds,
        "wrong": sum(r["wrong"] for r in rounds),
        "failed": sum(r["failed"] for r in rounds),
        "replica_serves_after_s_median": statistics.median(r["replica_serves_after_s"] for r in rounds),
        "fresh_hits_after_s_median": statistics.median(fresh) if fresh else None,
        "fresh_hits_after_s_max": max(fresh) if fresh else None,
    }


def main() -> None:
    # The caches log each store failure (with its traceback) while the primary is down: expected here.
    logging.getLogger("mcpcache").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", type=float, default=2.0, help="seconds of traffic before the kill")
    parser.add_argument("--node-timeout-ms", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    document = anyio.run(run, args)
    print(json.dumps({k: v for k, v in document.items() if k != "rounds"}, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
