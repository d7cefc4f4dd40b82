"""Call latencies of the tool cache and of References over a frozen (SIGSTOP) and a killed redis-server.

Starts its own redis-server on a free loopback port (only that process is signalled), runs a ToolCache
over an in-process FastMCP server and References on a RedisStore with default settings, and prints p50
and max per fault. Usage: python benchmarks/redis_faults.py [--calls N] [--redis-server PATH]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import time
from typing import Any

import anyio
from fastmcp import Client, FastMCP

from mcpcache.bench.common import percentile
from mcpcache.client import ToolCache
from mcpcache.processes import RedisServer
from mcpcache.refs import References
from mcpcache.stores import RedisStore

BIG = {"rows": [{"i": i, "text": "x" * 40} for i in range(400)]}


def build_server() -> FastMCP:
    server = FastMCP("faults")

    @server.tool
    def read(key: str) -> dict[str, Any]:
        return {"key": key, "text": f"{key}: text"}

    return server


async def measure(server: RedisServer, fault: str, calls: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"tool call": [], "for_model": [], "resolve": []}
    assert server.process is not None
    async with RedisStore(server.url, namespace=f"bench-{fault}") as store:
        cache = ToolCache(store)
        refs = References(store, conversation_id="c", threshold_bytes=1000)
        uri = str((await refs.for_model(BIG, server="s", tool="t")).uri)
        async with Client(build_server()) as client:
            view = cache.wrap(client, server_id="faults")
            await view.call_mcp("read", {"key": "k"})
            pid = server.process.pid
            if fault == "frozen":
                os.kill(pid, signal.SIGSTOP)
            else:
                server.kill()
            try:
                for _ in range(calls):
                    for name, action in (
                        ("tool call", lambda: view.call_mcp("read", {"key": "k"})),
                        ("for_model", lambda: refs.for_model(BIG, server="s", tool="t")),
                        ("resolve", lambda: refs.resolve(tool="t", arguments={"data_uri": uri})),
                    ):
                        started = time.perf_counter()
                        await action()
                        samples[name].append(time.perf_counter() - started)
            finally:
                if fault == "frozen":
                    os.kill(pid, signal.SIGCONT)
                else:
                    server.start()
    return samples


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "/usr/bin/redis-server")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # every failed store op warns; the table is the point here
    print(f"{'fault':8} {'operation':10} {'calls':>5} {'p50 ms':>8} {'max ms':>8}")
    for fault in ("frozen", "killed"):
        with RedisServer(args.redis_server) as server:
            results = await measure(server, fault, args.calls)
        for name, samples in results.items():
            print(
                f"{fault:8} {name:10} {len(samples):5d} {percentile(samples, 0.5) * 1000:8.1f} "
                f"{max(samples) * 1000:8.1f}"
            )


if __name__ == "__main__":
    anyio.run(main)
