"""What `mcpcache gateway` costs and saves: bytes and time per read of a large notebook, direct and through it.

The upstream is `python -m mcpcache demo-server --no-revalidation` over streamable HTTP on 127.0.0.1 (a
server that never heard of mcpcache). Three ways to reach it, each read by a stock `fastmcp.Client` and
by the same client wrapped in mcpcache's `ToolCache` (a MemoryStore):

- direct: the client talks to the upstream;
- gateway: `mcpcache gateway --upstream URL --tool read_notebook=0` (tags only: every read goes upstream,
  a caller holding the current tag gets a not-modified reply);
- gateway+redis: `--tool read_notebook=60000:public --redis URL` (answers within the ttl come from the
  shared store without calling upstream; the mcpcache client keeps its own copy fresh for the ttl too).

`mcpcache bench --full` runs the proxy-and-gateway scenario (mcpcache.bench.hops, whose helpers this script
uses); this script adds the stock client through the gateway and the shared Redis store.

Every configuration keeps one connected client; each round reads once in every configuration, in a
shuffled order, after one warm-up read each. Bytes are counted at the client's transport
(mcpcache.bench.wire: JSON-RPC message bytes, HTTP framing not counted); time is the client's wall time
per read. Ratios ("vs direct") are taken per round against the stock client direct, then summarised (median, and the
25th-75th percentile spread). The redis-server and the three HTTP servers are started here on free
loopback ports and stopped by PID.

Run:  python benchmarks/gateway.py                 (5 MB notebook, 12 rounds: about two minutes)
      python benchmarks/gateway.py --size 1MB --rounds 4   (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import fastmcp
from fastmcp.client.transports import StreamableHttpTransport

from mcpcache.bench.common import machine, percentile
from mcpcache.bench.hops import TAGS_ONLY, demo_servers, gateway, spread
from mcpcache.bench.runner import parse_size
from mcpcache.bench.wire import CountingFastMCPTransport, WireLog
from mcpcache.client import ToolCache
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.processes import RedisServer
from mcpcache.stores import MemoryStore

NOTEBOOK = "bench.ipynb"
ARGS = {"path": NOTEBOOK}


@dataclass
class Config:
    name: str
    url: str
    mcpcache: bool
    log: WireLog = field(default_factory=WireLog)
    seconds: list[float] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    read: Callable[[], Awaitable[str]] | None = None


@asynccontextmanager
async def connected(config: Config) -> AsyncIterator[None]:
    # No bound on one server-sent event: a 5 MB notebook's answer is one ~10 MB event.
    transport = CountingFastMCPTransport(StreamableHttpTransport(config.url, max_sse_event_size=None), config.log)
    async with fastmcp.Client(transport, timeout=300) as client:
        if config.mcpcache:
            cached = ToolCache(MemoryStore()).wrap(client, server_id=config.url)

            async def read() -> str:
                call = await cached.call_mcp("read_notebook", ARGS)
                assert not call.result.is_error, call.result
                return str(call.outcome.status)

        else:

            async def read() -> str:
                result = await client.call_tool_mcp("read_notebook", ARGS)
                assert not result.is_error, result
                return "full"

        config.read = read
        yield


def summary(values: list[float]) -> str:
    middle = spread(values)
    return f"{middle['median']:.3g} [{middle['p25']:.3g}-{middle['p75']:.3g}]"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="mcpcache-gateway-bench-"))
    generate_notebook_of_size(folder / NOTEBOOK, parse_size(args.size), seed=3)
    redis_binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    with RedisServer(redis_binary) as redis, demo_servers(folder, {"upstream": ("--no-revalidation",)}) as ports:
        upstream = f"http://127.0.0.1:{ports['upstream']}/mcp"
        gateways = {
            "gateway": TAGS_ONLY,
            "gateway+redis": ("--tool", "read_notebook=60000:public", "--redis", redis.url),
        }
        async with AsyncExitStack() as stack:
            urls = {"direct": upstream}
            for name, options in gateways.items():
                port = await stack.enter_async_context(gateway(upstream, *options))
                urls[name] = f"http://127.0.0.1:{port}/mcp"
            configs = [
                Config(f"{client} -> {way}", urls[way], client == "mcpcache")
                for client in ("stock", "mcpcache")
                for way in ("direct", "gateway", "gateway+redis")
            ]
            for config in configs:
                await stack.enter_async_context(connected(config))
                assert config.read is not None
                await config.read()  # warm-up: connections, tool lists, caches filled
            for _ in range(args.rounds):
                order = configs[:]
                random.shuffle(order)
                for config in order:
                    assert config.read is not None
                    mark = config.log.mark()
                    began = time.perf_counter()
                    status = await config.read()
                    config.seconds.append(time.perf_counter() - began)
                    config.nbytes.append(config.log.total(since=mark))
                    config.statuses.append(status)
    shutil.rmtree(folder, ignore_errors=True)
    base = configs[0]
    rows = []
    for config in configs:
        time_ratios = [c / b for c, b in zip(config.seconds, base.seconds, strict=True)]
        byte_ratios = [c / b for c, b in zip(config.nbytes, base.nbytes, strict=True)]
        rows.append(
            {
                "config": config.name,
                "median_ms": statistics.median(config.seconds) * 1000,
                "p95_ms": percentile(config.seconds, 0.95) * 1000,
                "median_bytes": statistics.median(config.nbytes),
                "time_vs_direct": summary(time_ratios),
                "bytes_vs_direct": summary(byte_ratios),
                "outcomes": {status: config.statuses.count(status) for status in sorted(set(config.statuses))},
            }
        )
    return {"size": args.size, "rounds": args.rounds, "machine": machine(), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="5MB", help="notebook size on disk (default 5MB)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    document = anyio.run(run, args)
    print(f"read_notebook of a {args.size} notebook over streamable HTTP on 127.0.0.1, {args.rounds} rounds\n")
    print("| configuration | median ms | p95 ms | bytes per read | time vs direct | bytes vs direct | outcomes |")
    print("|---|---:|---:|---:|---|---|---|")
    for row in document["rows"]:
        print(
            f"| {row['config']} | {row['median_ms']:.1f} | {row['p95_ms']:.1f} | {row['median_bytes']:,.0f} | "
            f"{row['time_vs_direct']} | {row['bytes_vs_direct']} | {row['outcomes']} |"
        )
    print(f"\n{document['machine']['cpu']}, {document['machine']['cores']} cores; {document['machine']['libraries']}")
    if args.json is not None:
        args.json.write_text(json.dumps(document, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
