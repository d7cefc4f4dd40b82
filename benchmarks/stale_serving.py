"""What serving stale buys a caller, and what its hook costs a fresh hit.

1. A read of a stale entry of a slow tool (its body takes `--delay-ms`, 50 ms by default; ttl 0, so every
   reuse is stale), as the caller waits for it: served at once while it is revalidated in the background
   (`ToolCache()`, the server granting `staleWhileRevalidateMs`), against revalidated in the foreground
   (`CacheSettings(serve_stale=False)`, the same server). The background revalidation lands (`flush()`)
   before the next read, untimed.
2. A fresh hit through `ToolCache.execute`, which wraps the driver for stale-if-error, against the driver
   called directly (`ToolCache._execute`, the same cache and view): the cost of the hook on the hot path,
   timed over batches of `--batch` calls.

A FastMCP server in this process over memory streams, a `fastmcp.Client` wrapped by the cache, a memory store.
The configurations alternate within each round; the figures are medians with p10..p90 of the per-call times,
and the ratio of the medians (for the fresh hit, the median of the per-round ratios, with p10..p90).

Run:  python benchmarks/stale_serving.py [--rounds 30] [--delay-ms 50] [--batch 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import anyio
import fastmcp

from mcpcache.client import CacheSettings, ToolCache
from mcpcache.server import cache_meta
from mcpcache.server.fastmcp import install
from mcpcache.stores import MemoryStore


def build_server(delay_s: float) -> fastmcp.FastMCP[Any]:
    server: fastmcp.FastMCP[Any] = fastmcp.FastMCP("stale-bench")

    @server.tool(meta=cache_meta(ttl_ms=0, stale_while_revalidate_ms=3_600_000), annotations={"readOnlyHint": True})
    async def slow(key: str) -> dict[str, Any]:
        await anyio.sleep(delay_s)
        return {"kind": "doc", "key": key, "rows": [{"id": i, "name": f"row {i}"} for i in range(200)]}

    @server.tool(meta=cache_meta(ttl_ms=3_600_000), annotations={"readOnlyHint": True})
    def fresh(key: str) -> dict[str, Any]:
        return {"kind": "doc", "key": key, "rows": [{"id": i, "name": f"row {i}"} for i in range(200)]}

    install(server)
    return server


def spread(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    deciles = statistics.quantiles(ordered, n=10) if len(ordered) > 1 else [ordered[0]] * 9
    return {"median": statistics.median(ordered), "p10": deciles[0], "p90": deciles[-1]}


def shown(name: str, figures: dict[str, float], unit: float, label: str) -> str:
    return (
        f"  {name:<32} {figures['median'] * unit:9.1f} {label}  "
        f"(p10 {figures['p10'] * unit:.1f}, p90 {figures['p90'] * unit:.1f})"
    )


async def main(rounds: int, delay_ms: float, batch: int) -> dict[str, Any]:
    server = build_server(delay_ms / 1000)
    stale_reads: dict[str, list[float]] = {"stale_while_revalidate": [], "foreground": []}
    hits: dict[str, list[float]] = {"execute (with the hook)": [], "_execute (driver alone)": []}
    async with fastmcp.Client(server) as client:
        serving = ToolCache(MemoryStore())
        foreground = ToolCache(MemoryStore(), CacheSettings(serve_stale=False))
        views = {"stale_while_revalidate": serving.wrap(client), "foreground": foreground.wrap(client)}
        for view in views.values():
            await view.call_mcp("slow", {"key": "k"})  # stored; stale at once (ttl 0)
        hot = ToolCache(MemoryStore())
        hot_view = hot.wrap(client)
        await hot_view.call_mcp("fresh", {"key": "k"})
        direct = hot._execute

        paired: list[float] = []
        for round_ in range(rounds):
            for name, view in views.items():
                started = time.perf_counter()
                call = await view.call_mcp("slow", {"key": "k"})
                stale_reads[name].append(time.perf_counter() - started)
                expected = "stale_while_revalidate" if name == "stale_while_revalidate" else "revalidated"
                assert call.outcome.status == expected, call.outcome
                await serving.flush()
            names = list(hits) if round_ % 2 == 0 else list(reversed(hits))  # neither always goes first
            for name in names:
                # The instance attribute shadows the method for this batch only: the same view, cache and path.
                if name.startswith("_execute"):
                    hot.execute = direct  # type: ignore[method-assign]
                started = time.perf_counter()
                for _ in range(batch):
                    call = await hot_view.call_mcp("fresh", {"key": "k"})
                hits[name].append((time.perf_counter() - started) / batch)
                assert call.outcome.status == "fresh_hit"
                vars(hot).pop("execute", None)
            paired.append(hits["execute (with the hook)"][-1] / hits["_execute (driver alone)"][-1])
        await serving.close()
        await foreground.close()

    result: dict[str, Any] = {"rounds": rounds, "delay_ms": delay_ms, "batch": batch}
    print(f"A stale read of a tool whose body takes {delay_ms:g} ms ({rounds} rounds, interleaved):")
    figures = {name: spread(samples) for name, samples in stale_reads.items()}
    for name, value in figures.items():
        print(shown(name, value, 1000, "ms"))
    ratio = figures["foreground"]["median"] / figures["stale_while_revalidate"]["median"]
    print(f"  the caller waits {ratio:.0f}x less when served stale")
    result["stale_read_s"] = figures
    print(f"A fresh hit ({batch} calls per batch, {rounds} batches each, interleaved):")
    hit_figures = {name: spread(samples) for name, samples in hits.items()}
    for name, value in hit_figures.items():
        print(shown(name, value, 1e6, "us"))
    hook_spread = spread(paired)
    hook = hook_spread["median"]
    print(
        f"  with the hook / driver alone, per round: {hook:.3f} "
        f"(p10 {hook_spread['p10']:.3f}, p90 {hook_spread['p90']:.3f})"
    )
    result["fresh_hit_s"] = hit_figures
    result["ratios"] = {"foreground_over_stale": ratio, "hook_over_driver": hook}
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    measured = anyio.run(main, args.rounds, args.delay_ms, args.batch)
    if args.json is not None:
        args.json.write_text(json.dumps(measured, indent=2))
