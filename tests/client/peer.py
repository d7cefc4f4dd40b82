"""Another process using the same store: `python peer.py <sqlite|redis> <location> <namespace> <now> <partition>...`.

It has its own in-memory lab server (so its body runs are its own to count), wraps a `fastmcp.Client` on it
with a `ToolCache` per partition over the shared store, calls `read` once per partition under the server
identity the parent used, and prints one JSON line per partition: the cache's outcome, the body runs its
own server saw, and the answer's structured content.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fastmcp

from client.lab import Lab, build_lab
from mcpcache.client import ToolCache
from mcpcache.stores import RedisStore, SQLiteStore, Store

SERVER_ID = "shared-lab"
KEY = "k"


def open_store(kind: str, location: str, namespace: str, now: float) -> Store:
    if kind == "sqlite":
        return SQLiteStore(location, namespace=namespace, clock=lambda: now)
    return RedisStore(location, namespace=namespace)


async def main(kind: str, location: str, namespace: str, now: float, partitions: list[str]) -> None:
    lab = Lab()
    async with open_store(kind, location, namespace, now) as store:
        for partition in partitions:
            cache = ToolCache(store, partition=partition, clock=lambda: now)
            async with fastmcp.Client(build_lab("fastmcp", lab)) as client:
                call = await cache.wrap(client, server_id=SERVER_ID).call("read", {"key": KEY})
            report = {
                "partition": partition,
                "status": call.outcome.status,
                "runs": lab.runs("read", KEY),
                "answer": call.result.structured_content,
            }
            print(json.dumps(report), flush=True)


if __name__ == "__main__":
    kind, location, namespace, now, *partitions = sys.argv[1:]
    asyncio.run(main(kind, location, namespace, float(now), partitions))
