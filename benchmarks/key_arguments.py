"""Key arguments: what a call carrying a volatile argument (a fresh request id each time) costs with and without
them, and what keying on the projection adds to a fresh hit.

The SDK `mcp.Client` over the in-memory transport to an in-process FastMCP server stamped by mcpcache, one
read-only tool `read(path, request_id)` answering about 1 KB, declared `ignoreArguments: ["request_id"]`, a
day fresh. Three configurations, each a `ToolCache(MemoryStore())`:

- `every-argument`: the cache does not trust the server, and every call carries a new request id: each call
  is a miss (a round trip, and an entry stored).
- `key-arguments`: the same calls, the cache trusting the server's declaration: each call is a fresh hit.
- `same-id`: an untrusting cache and the same request id every time: a fresh hit keyed on every argument
  (the cost of a hit without any projection).

Each round times a block of calls per configuration, blocks in a shuffled order; a round's value is its
block's median; ratios are taken per round and summarised as median [p10-p90].

Run:  python benchmarks/key_arguments.py                 (20 rounds of 200 calls each)
      python benchmarks/key_arguments.py --rounds 5 --calls 50   (a smoke run)
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp
import mcp_types as mt
from fastmcp import FastMCP
from mcp.client._memory import InMemoryTransport

from mcpcache.bench.common import machine, percentile
from mcpcache.client import CacheSettings, ToolCache
from mcpcache.protocol import MAX_TTL_MS
from mcpcache.server import cache_meta
from mcpcache.server.fastmcp import install
from mcpcache.stores import MemoryStore

CONFIGS = ("every-argument", "key-arguments", "same-id")


def build_server() -> FastMCP[Any]:
    server: FastMCP[Any] = FastMCP("key-arguments")
    text = "x" * 900

    @server.tool(
        annotations=mt.ToolAnnotations(read_only_hint=True),
        meta=cache_meta(ttl_ms=MAX_TTL_MS, ignore_arguments=["request_id"]),
    )
    def read(path: str, request_id: str = "") -> dict[str, Any]:
        return {"kind": "doc", "path": path, "text": text}

    install(server)
    return server


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{percentile(values, 0.10):.1f}-{percentile(values, 0.90):.1f}]"


async def main(rounds: int, calls: int) -> None:
    ids = itertools.count()
    server = build_server()
    async with mcp.Client(InMemoryTransport(server._mcp_server)) as client:
        views = {
            "every-argument": ToolCache(MemoryStore()).wrap(client, server_id="bench"),
            "key-arguments": ToolCache(MemoryStore(), CacheSettings(trusted=True)).wrap(client, server_id="bench"),
            "same-id": ToolCache(MemoryStore()).wrap(client, server_id="bench"),
        }

        def one(config: str) -> Callable[[], Awaitable[Any]]:
            view = views[config]

            async def call() -> Any:
                request_id = "same" if config == "same-id" else f"r{next(ids)}"
                return await view.call("read", {"path": "a", "request_id": request_id})

            return call

        statuses: dict[str, set[str]] = {config: set() for config in CONFIGS}
        for config in CONFIGS:  # warm: each cache holds the answer (same-id's, under its one id)
            await one(config)()
        per_round: dict[str, list[float]] = {config: [] for config in CONFIGS}
        for _ in range(rounds):
            order = list(CONFIGS)
            random.shuffle(order)
            for config in order:
                call = one(config)
                times = []
                for _ in range(calls):
                    start = time.perf_counter()
                    made = await call()
                    times.append((time.perf_counter() - start) * 1e6)
                    statuses[config].add(made.outcome.status)
                per_round[config].append(statistics.median(times))
    print(f"machine: {machine()}")
    print(f"{rounds} rounds of {calls} calls per configuration; µs per call, median [p10-p90] of round medians")
    for config in CONFIGS:
        print(f"  {config:15} {spread(per_round[config]):>24}   outcomes: {', '.join(sorted(statuses[config]))}")
    saved = [a / b for a, b in zip(per_round["every-argument"], per_round["key-arguments"], strict=True)]
    extra = [a / b for a, b in zip(per_round["key-arguments"], per_round["same-id"], strict=True)]
    print(f"every-argument ÷ key-arguments (a new request id each call): {spread(saved)}x")
    print(f"key-arguments ÷ same-id (a hit through the projection vs a hit on every argument): {spread(extra)}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    options = parser.parse_args()
    anyio.run(main, options.rounds, options.calls)
