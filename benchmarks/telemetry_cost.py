"""What OpenTelemetry costs the client's hottest path: a fresh hit of a small answer, in one interleaved run.

A `ToolCache(MemoryStore())` wrapping an SDK `mcp.Client` over the in-memory transport to an in-process
FastMCP server (benchmarks/client_overhead.py's table tool, stamped by mcpcache), answers of about 1 KB and
100 KB, each call a fresh hit. The configurations differ only in the cache's telemetry:

- `none`: no telemetry code at all (the cache's telemetry replaced by one that does nothing);
- `before`: what the cache did before it had spans and metrics of its own: the outcome put on the caller's
  current span if it records (here none does), nothing else;
- `default`: as shipped, no provider configured anywhere (the OpenTelemetry API's stand-ins): the common
  case, which must cost about nothing;
- `sdk`: as shipped, given the OpenTelemetry SDK's tracer and meter providers (an in-memory span exporter
  behind a `SimpleSpanProcessor`, and an in-memory metric reader): a span of the cache's own and two
  counters per call; `sdk-spans` and `sdk-metrics` with one of the two providers only.

Each round times a block of hits per configuration, the blocks in a shuffled order; a round's value is its
block's median; each configuration's ratio to `before` is taken per round. Reported as median [p10-p90].

Run:  python benchmarks/telemetry_cost.py                 (about a minute)
      python benchmarks/telemetry_cost.py --rounds 40 --json out.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp.client._memory import InMemoryTransport
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcpcache.bench.common import machine, percentile
from mcpcache.client import ToolCache
from mcpcache.client.outcomes import CallOutcome
from mcpcache.stores import MemoryStore
from mcpcache.telemetry import annotate_current_span

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_overhead import build_table_server, calibrate_rows

SIZES = (("1 KB", 1_000, 300), ("100 KB", 100_000, 60))
"""(label, target bytes, hits per round and configuration)."""

Call = Callable[[], Awaitable[object]]


class NoTelemetry:
    """`none`: the cache's telemetry, doing nothing."""

    def begin(self, tool: str) -> None:
        return None

    def own(self, span: Any) -> bool:
        return False

    def record(self, span: Any, server_id: str, tool: str, outcome: CallOutcome) -> None:
        return None

    def failed(self, span: Any, error: BaseException) -> None:
        return None

    def store_failure(self, store: str) -> None:
        return None


class BeforeTelemetry(NoTelemetry):
    """`before`: the outcome on the caller's current span, if it records; nothing else (as before spans and
    metrics of the cache's own)."""

    def record(self, span: Any, server_id: str, tool: str, outcome: CallOutcome) -> None:
        def attributes() -> dict[str, str | int | bool]:
            return {"mcpcache.client.outcome": outcome.status, "mcpcache.client.tool": tool}

        annotate_current_span(attributes, event="mcpcache.client.tool_call")


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": statistics.median(ordered),
        "p10": percentile(ordered, 0.1),
        "p90": percentile(ordered, 0.9),
    }


async def timed(call: Call) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


def caches() -> tuple[dict[str, ToolCache], list[Any]]:
    made = {name: ToolCache(MemoryStore()) for name in ("none", "before", "default")}
    made["none"]._telemetry = NoTelemetry()  # type: ignore[assignment]
    made["before"]._telemetry = BeforeTelemetry()  # type: ignore[assignment]
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    made["sdk"] = ToolCache(MemoryStore(), tracer_provider=tracer_provider, meter_provider=meter_provider)
    made["sdk-spans"] = ToolCache(MemoryStore(), tracer_provider=tracer_provider)
    made["sdk-metrics"] = ToolCache(MemoryStore(), meter_provider=meter_provider)
    return made, [tracer_provider, meter_provider]


async def run(rounds: int) -> dict[str, Any]:
    server = build_table_server()
    results: dict[str, Any] = {}
    for label, target, hits in SIZES:
        rows, size = await calibrate_rows(server, target)
        args = {"rows": rows}
        made, providers = caches()
        async with mcp.Client(InMemoryTransport(server._mcp_server)) as client:
            views = {name: cache.wrap(client) for name, cache in made.items()}

            def caller(view: Any, args: dict[str, Any] = args) -> Call:
                async def one() -> object:
                    return await view.call_tool("table", args)

                return one

            calls = {name: caller(view) for name, view in views.items()}
            for call in calls.values():
                for _ in range(50):
                    await call()
            per_round: dict[str, list[float]] = {name: [] for name in calls}
            order = list(calls)
            rng = random.Random(23)
            for index in range(rounds):
                print(f"{label}: round {index + 1} of {rounds}...", file=sys.stderr)
                rng.shuffle(order)
                gc.collect()
                gc.disable()
                try:
                    for name in order:
                        per_round[name].append(statistics.median([await timed(calls[name]) for _ in range(hits)]))
                finally:
                    gc.enable()
        not_fresh = {name: cache.stats.calls - cache.stats.fresh_hits - 1 for name, cache in made.items()}
        for provider in providers:
            provider.shutdown()
        results[label] = {
            "answer_bytes": size,
            "us": {name: spread([v * 1e6 for v in values]) for name, values in per_round.items()},
            "over_before": {
                name: spread([v / b for v, b in zip(values, per_round["before"], strict=True)])
                for name, values in per_round.items()
            },
            "not_fresh": not_fresh,
        }
    return {"rounds": rounds, "machine": machine(), "load": os.getloadavg()[0], "sizes": results}


def render(r: dict[str, Any]) -> str:
    out = [
        f"{r['rounds']} rounds; load average {r['load']:.2f}; median [p10-p90] over the rounds.",
        "",
        "| answer | configuration | fresh hit, µs | ÷ before | not fresh |",
        "|---|---|---:|---:|---:|",
    ]
    for label, row in r["sizes"].items():
        for name in ("none", "before", "default", "sdk-metrics", "sdk-spans", "sdk"):
            us, ratio = row["us"][name], row["over_before"][name]
            out.append(
                f"| {label} ({row['answer_bytes']:,} B) | `{name}` "
                f"| {us['median']:.1f} [{us['p10']:.1f}-{us['p90']:.1f}] "
                f"| {ratio['median']:.3f} [{ratio['p10']:.3f}-{ratio['p90']:.3f}] | {row['not_fresh'][name]} |"
            )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args()
    results = anyio.run(run, args.rounds)
    print(render(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
