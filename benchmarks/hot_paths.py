"""The client's two hot paths, each against the call it stands in for, in one interleaved run.

1. `unchanged`: the unchanged path. `read_notebook` of a 5 MB notebook (a 9.7 MB answer) over streamable HTTP
   on 127.0.0.1, from `python -m mcpcache demo-server` in subprocesses (stopped by PID):
   - `full`: a stock `mcp.Client` reading it whole from the plain FastMCP server (`--no-revalidation`);
   - `bare`: a stock `mcp.Client` sending the conditional call with the current tag to the server with a
     validator (`--validator --ttl-ms 0`), no client cache: the not-modified reply, parsed by the session;
   - `memory`, `sqlite`: `ToolCache(MemoryStore())` / `ToolCache(SQLiteStore(file))` wrapping a client of
     the validator server: every read revalidates (ttl 0) and serves the stored answer (steady state: the
     stored answer was checked against the output schema once);
   - `memory-view`, `sqlite-view`: the same with `CacheSettings(read_only_views=True)` (the opt-in that serves the
     held answer itself, no copy), when this mcpcache has it.
   Each round takes the full read once and then the cheap configurations alternately, call by call, the
   order flipped every call (`--reps` calls each); a round's value for a configuration is the median of its
   calls. Reported per round, then summarised: each configuration minus `bare` (ms), and `full` over each
   configuration (x), as median [p10-p90].

2. `fresh`: small fresh hits against the round trip they replace: the SDK `mcp.Client` over the in-memory
   transport to an in-process FastMCP server (benchmarks/client_overhead.py's table tool, stamped by
   mcpcache), answers of about 1 KB and 100 KB, against `ToolCache(MemoryStore()).wrap(client).call_tool`
   while the stored answer is fresh (and SQLiteStore, and the read-only view, for scale). Each round times a
   block of round trips and a block of hits per configuration, blocks in a shuffled order; a round's value is
   its block's median; the ratio round trip ÷ hit is taken per round.

3. `miss`: a small miss (about 1 KB, the same in-memory server) against the round trip it wraps: every call
   through `ToolCache(MemoryStore())` is a miss because the cache keeps nothing (`max_answer_bytes=1`), so
   what is measured is the miss path's own cost (fresh check, naming, lookup, the decision), not a store write.
   Round trip and miss alternate call by call; each round's value is the median of its calls, in CPU time of
   this process (client and server both run in it) and in wall time; the ratio miss ÷ round trip per round.

Run:  python benchmarks/hot_paths.py                      (all three parts, about three minutes)
      python benchmarks/hot_paths.py --only unchanged --rounds 40
      python benchmarks/hot_paths.py --only fresh
      python benchmarks/hot_paths.py --only miss --rounds 30
      python benchmarks/hot_paths.py --quick                (a smoke run: few rounds, not for the docs)
      python benchmarks/hot_paths.py --json out.json        (also the raw per-round values)
      python benchmarks/hot_paths.py --profile unchanged|fresh|miss   (cProfile of the cached path, no timing)
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import inspect
import io
import json
import os
import pstats
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import anyio
import mcp
import mcp_types as mt
from mcp.client._memory import InMemoryTransport
from mcp.client.streamable_http import streamable_http_client

from mcpcache.bench.common import machine, percentile
from mcpcache.client import ToolCache
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.protocol import META_KEY, conditional_request_meta
from mcpcache.stores import MemoryStore, SQLiteStore, Store

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_overhead import build_table_server, calibrate_rows, http_demo_server

MB = 1_000_000
NOTEBOOK_BYTES = 5 * MB
HTTP_MAX_EVENT_BYTES = 1024 * 1024 * 1024
try:
    from mcpcache.client import CacheSettings
except ImportError:  # an mcpcache from before the settings object: its settings were ToolCache's keywords
    CacheSettings = None  # type: ignore[assignment,misc]
VIEWS = CacheSettings is not None or "read_only_views" in inspect.signature(ToolCache).parameters
"""Whether this mcpcache has the read-only view opt-in (so the same script measures before and after it)."""


def tool_cache(store: Store, **settings: Any) -> ToolCache:
    """A `ToolCache` with these settings, as this mcpcache takes them (so the script measures before and after
    the settings object)."""
    if CacheSettings is None:
        return ToolCache(store, **settings)
    return ToolCache(store, CacheSettings(**settings))


Call = Callable[[], Awaitable[object]]


def spread(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "p10": percentile(values, 0.10),
        "p90": percentile(values, 0.90),
        "min": min(values),
        "max": max(values),
    }


def show(s: dict[str, float], fmt: str = "{:.2f}") -> str:
    return f"**{fmt.format(s['median'])}** [{fmt.format(s['p10'])}–{fmt.format(s['p90'])}]"


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def timed(call: Call) -> float:
    start = time.perf_counter()
    await call()
    return time.perf_counter() - start


async def timed_cpu(call: Call) -> tuple[float, float]:
    """Wall time and this process's CPU time (every thread: SQLite's work in its worker thread counts)."""
    cpu, start = time.process_time(), time.perf_counter()
    await call()
    return time.perf_counter() - start, time.process_time() - cpu


# --- 1. the unchanged path ---------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def http_client(url: str) -> AsyncIterator[mcp.Client]:
    transport = streamable_http_client(url, max_sse_event_size=HTTP_MAX_EVENT_BYTES)
    async with mcp.Client(transport) as client:
        await client.list_tools()  # the schemas the SDK checks answers against, outside the timed reads
        yield client


def _cache(kind: str, tmp: Path) -> ToolCache:
    store = MemoryStore() if kind.startswith("memory") else SQLiteStore(tmp / f"{kind}.db")
    return tool_cache(store, **({"read_only_views": True} if kind.endswith("-view") else {}))


async def unchanged(rounds: int, reps: int, errlog: TextIO, profile: bool) -> dict[str, Any]:
    kinds = ["memory", "sqlite"] + (["memory-view", "sqlite-view"] if VIEWS else [])
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcpcache-hot-")))
        name = "read-5mb.ipynb"
        for folder in ("plain", "validator"):
            (tmp / folder).mkdir()
            generate_notebook_of_size(tmp / folder / name, NOTEBOOK_BYTES, seed=5)
        plain_url = stack.enter_context(http_demo_server(tmp / "plain", ["--no-revalidation"], errlog))
        validator_flags = ["--validator", "--ttl-ms", "0"]
        validator_url = stack.enter_context(http_demo_server(tmp / "validator", validator_flags, errlog))
        args = {"path": name}
        async with contextlib.AsyncExitStack() as clients:
            full_client = await clients.enter_async_context(http_client(plain_url))
            bare_client = await clients.enter_async_context(http_client(validator_url))
            answer = await bare_client.call_tool("read_notebook", args)
            tag = ((answer.meta or {}).get(META_KEY) or {}).get("etag")
            assert isinstance(tag, str), "the validator server stamped no tag"
            request = mt.CallToolRequest(
                params=mt.CallToolRequestParams(
                    name="read_notebook", arguments=args, _meta=conditional_request_meta(tag)
                )
            )
            caches: dict[str, ToolCache] = {}
            views: dict[str, Any] = {}
            for kind in kinds:
                caches[kind] = _cache(kind, tmp)
                views[kind] = caches[kind].wrap(await clients.enter_async_context(http_client(validator_url)))
                first = await views[kind].call("read_notebook", args)
                assert first.outcome.status == "miss", first.outcome

            async def full() -> object:
                return await full_client.call_tool("read_notebook", args)

            async def bare() -> object:
                reply = await bare_client.session.send_request(request, mt.CallToolResult)
                assert (reply.meta or {}).get(META_KEY, {}).get("notModified") is True
                return reply

            statuses: dict[str, dict[str, int]] = {kind: {} for kind in kinds}

            def cached(kind: str) -> Call:
                async def call() -> object:
                    done = await views[kind].call("read_notebook", args)
                    counts = statuses[kind]
                    counts[done.outcome.status] = counts.get(done.outcome.status, 0) + 1
                    return done

                return call

            cheap: dict[str, Call] = {"bare": bare, **{kind: cached(kind) for kind in kinds}}
            for call in [full, *cheap.values()]:
                await call()
            if profile:
                for kind in kinds:
                    for s in statuses.values():
                        s.clear()
                    print(f"\n#### cProfile: 200 revalidations, {kind}\n", file=sys.stderr)
                    print(await profile_calls(cheap[kind], 200), file=sys.stderr)
            for s in statuses.values():
                s.clear()
            per_round: dict[str, list[float]] = {name: [] for name in ["full", *cheap]}
            cpu_round: dict[str, list[float]] = {name: [] for name in cheap}
            order = list(cheap)
            rng = random.Random(20)
            for index in range(rounds):
                print(f"unchanged: round {index + 1} of {rounds}...", file=sys.stderr)
                rng.shuffle(order)
                with gc_paused():
                    per_round["full"].append(await timed(full))
                gc.collect()
                samples: dict[str, list[float]] = {name: [] for name in cheap}
                cpu_samples: dict[str, list[float]] = {name: [] for name in cheap}
                with gc_paused():
                    for rep in range(reps):
                        for name in order if rep % 2 == 0 else reversed(order):
                            wall, cpu = await timed_cpu(cheap[name])
                            samples[name].append(wall)
                            cpu_samples[name].append(cpu)
                for name, values in samples.items():
                    per_round[name].append(statistics.median(values))
                    cpu_round[name].append(statistics.median(cpu_samples[name]))
            same = True
            for kind in kinds:
                served = await views[kind].call("read_notebook", args)
                same = same and served.result.structured_content == answer.structured_content
            for cache in caches.values():
                await cache.close()
                await cache.store.close()
    ms = {name: spread([v * 1e3 for v in values]) for name, values in per_round.items()}
    over_bare = {
        kind: spread([(a - b) * 1e3 for a, b in zip(per_round[kind], per_round["bare"], strict=True)]) for kind in kinds
    }
    cpu_minus_bare = {
        kind: spread([(a - b) * 1e3 for a, b in zip(cpu_round[kind], cpu_round["bare"], strict=True)]) for kind in kinds
    }
    full_over = {
        name: spread([f / v for f, v in zip(per_round["full"], per_round[name], strict=True)])
        for name in ["bare", *kinds]
    }
    return {
        "rounds": rounds,
        "reps": reps,
        "answer_bytes": len(answer.model_dump_json(by_alias=True, exclude_none=True)),
        "ms": ms,
        "minus_bare_ms": over_bare,
        "cpu_ms": {name: spread([v * 1e3 for v in values]) for name, values in cpu_round.items()},
        "cpu_minus_bare_ms": cpu_minus_bare,
        "full_over": full_over,
        "statuses": statuses,
        "same_answer": same,
        "per_round_s": per_round,
    }


def render_unchanged(r: dict[str, Any]) -> list[str]:
    out = [
        f"### The unchanged path: `read_notebook` of a 5 MB notebook ({r['answer_bytes'] / MB:.2f} MB answer) "
        "over streamable HTTP",
        "",
        f"{r['rounds']} rounds, {r['reps']} calls of each cheap configuration per round (alternating); "
        "median [p10–p90] over the rounds of the per-round values.",
        "",
        "| configuration | per read, ms | minus bare conditional call, ms | full read ÷ this "
        "| client CPU per read, ms | client CPU minus bare, ms | outcomes |",
        "|---|---|---|---|---|---|---|",
        f"| full read, stock client, plain FastMCP | {show(r['ms']['full'], '{:.1f}')} | | 1.0 | | | |",
        f"| bare conditional call, no client cache | {show(r['ms']['bare'])} | 0 "
        f"| {show(r['full_over']['bare'], '{:.1f}')} | {show(r['cpu_ms']['bare'])} | 0 | |",
    ]
    label = {
        "memory": "ToolCache, MemoryStore",
        "sqlite": "ToolCache, SQLiteStore",
        "memory-view": "ToolCache, MemoryStore, read-only views",
        "sqlite-view": "ToolCache, SQLiteStore, read-only views",
    }
    for kind in r["minus_bare_ms"]:
        outcomes = ", ".join(f"{k} {v}" for k, v in r["statuses"][kind].items())
        out.append(
            f"| {label[kind]} | {show(r['ms'][kind])} | {show(r['minus_bare_ms'][kind], '{:+.2f}')} "
            f"| {show(r['full_over'][kind], '{:.1f}')} | {show(r['cpu_ms'][kind])} "
            f"| {show(r['cpu_minus_bare_ms'][kind], '{:+.2f}')} | {outcomes} |"
        )
    out.append("")
    out.append(f"Every cached read served the same answer as the server: {'yes' if r['same_answer'] else 'NO'}.")
    return out


# --- 2. small fresh hits --------------------------------------------------------------------------------------

FRESH_SIZES = (("1 KB", 1_000, 10, 200), ("100 KB", 100_000, 3, 60))
"""(label, target bytes, round trips per round, hits per round and configuration)."""


async def fresh(rounds: int, profile: bool) -> dict[str, Any]:
    server = build_table_server()
    results: dict[str, Any] = {}
    kinds = ["memory", "sqlite"] + (["memory-view"] if VIEWS else [])
    with tempfile.TemporaryDirectory(prefix="mcpcache-hot-") as tmp:
        for label, target, trips, hits in FRESH_SIZES:
            rows, size = await calibrate_rows(server, target)
            (Path(tmp) / str(target)).mkdir()
            args = {"rows": rows}
            async with mcp.Client(InMemoryTransport(server._mcp_server)) as client:
                await client.list_tools()
                caches = {kind: _cache(kind, Path(tmp) / str(target)) for kind in kinds}
                views = {kind: cache.wrap(client) for kind, cache in caches.items()}
                for view in views.values():
                    await view.call_tool("table", args)

                def caller(target: Any, args: dict[str, Any] = args) -> Call:
                    async def one() -> object:
                        return await target.call_tool("table", args)

                    return one

                arms: dict[str, tuple[Call, int]] = {"trip": (caller(client), trips)}
                arms.update({kind: (caller(view), hits) for kind, view in views.items()})
                for call, _ in arms.values():
                    for _ in range(20):
                        await call()
                if profile:
                    print(f"\n#### cProfile: 3000 fresh hits, {label}, memory\n", file=sys.stderr)
                    print(await profile_calls(arms["memory"][0], 3000), file=sys.stderr)
                before = {kind: (c.stats.calls, c.stats.fresh_hits) for kind, c in caches.items()}
                per_round: dict[str, list[float]] = {name: [] for name in arms}
                order = list(arms)
                rng = random.Random(21)
                for index in range(rounds):
                    print(f"fresh {label}: round {index + 1} of {rounds}...", file=sys.stderr)
                    rng.shuffle(order)
                    gc.collect()
                    with gc_paused():
                        for name in order:
                            call, count = arms[name]
                            per_round[name].append(statistics.median([await timed(call) for _ in range(count)]))
                not_fresh = {
                    kind: (c.stats.calls - before[kind][0]) - (c.stats.fresh_hits - before[kind][1])
                    for kind, c in caches.items()
                }
                for cache in caches.values():
                    await cache.store.close()
            results[label] = {
                "answer_bytes": size,
                "us": {name: spread([v * 1e6 for v in values]) for name, values in per_round.items()},
                "trip_over": {
                    kind: spread([t / h for t, h in zip(per_round["trip"], per_round[kind], strict=True)])
                    for kind in kinds
                },
                "not_fresh": not_fresh,
                "per_round_s": per_round,
            }
    return {"rounds": rounds, "sizes": results}


def render_fresh(r: dict[str, Any]) -> list[str]:
    out = [
        "### Small fresh hits against an in-memory round trip (SDK `mcp.Client`, in-process FastMCP server)",
        "",
        f"{r['rounds']} rounds; median [p10–p90] over the rounds of the per-round values.",
        "",
        "| answer | round trip, µs | configuration | fresh hit, µs | round trip ÷ fresh hit | not fresh |",
        "|---|---|---|---|---|---|",
    ]
    label = {"memory": "MemoryStore", "sqlite": "SQLiteStore", "memory-view": "MemoryStore, read-only views"}
    for size, row in r["sizes"].items():
        for kind, ratio in row["trip_over"].items():
            out.append(
                f"| {size} ({row['answer_bytes']:,} B) | {show(row['us']['trip'], '{:.0f}')} | {label[kind]} "
                f"| {show(row['us'][kind], '{:.1f}')} | {show(ratio, '{:.0f}')}× | {row['not_fresh'][kind]} |"
            )
    return out


# --- 3. small misses -------------------------------------------------------------------------------------------

MISS_TRIPS = 40
"""Round trips and misses per round and configuration."""


async def miss(rounds: int, profile: bool) -> dict[str, Any]:
    """A small miss against the round trip it wraps: `ToolCache(MemoryStore())` with `max_answer_bytes=1`, so
    the answer is never kept and every call goes the miss path (the view's fresh check, naming the call,
    the lookup, the request, the decision not to keep it), against the stock client's call alone."""
    server = build_table_server()
    rows, size = await calibrate_rows(server, 1_000)
    args = {"rows": rows}
    async with mcp.Client(InMemoryTransport(server._mcp_server)) as client:
        await client.list_tools()
        cache = tool_cache(MemoryStore(), max_answer_bytes=1)
        view = cache.wrap(client)

        async def trip() -> object:
            return await client.call_tool("table", args)

        async def missed() -> object:
            return await view.call_tool("table", args)

        arms: dict[str, Call] = {"trip": trip, "miss": missed}
        for call in arms.values():
            for _ in range(20):
                await call()
        if profile:
            print("\n#### cProfile: 3000 misses, 1 KB, memory\n", file=sys.stderr)
            print(await profile_calls(missed, 3000), file=sys.stderr)
        wall: dict[str, list[float]] = {name: [] for name in arms}
        cpu: dict[str, list[float]] = {name: [] for name in arms}
        for index in range(rounds):
            print(f"miss: round {index + 1} of {rounds}...", file=sys.stderr)
            samples: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
            gc.collect()
            with gc_paused():
                for pair in range(MISS_TRIPS):  # call by call, the order flipped every pair
                    for name in ("trip", "miss") if pair % 2 == 0 else ("miss", "trip"):
                        samples[name].append(await timed_cpu(arms[name]))
            for name, taken in samples.items():
                wall[name].append(statistics.median(w for w, _ in taken))
                cpu[name].append(statistics.median(c for _, c in taken))
        misses = cache.stats.misses

    def ratio(values: dict[str, list[float]]) -> dict[str, float]:
        return spread([m / t for m, t in zip(values["miss"], values["trip"], strict=True)])

    def minus(values: dict[str, list[float]]) -> dict[str, float]:
        return spread([(m - t) * 1e6 for m, t in zip(values["miss"], values["trip"], strict=True)])

    return {
        "rounds": rounds,
        "answer_bytes": size,
        "us": {name: spread([v * 1e6 for v in values]) for name, values in wall.items()},
        "cpu_us": {name: spread([v * 1e6 for v in values]) for name, values in cpu.items()},
        "over_trip_us": minus(wall),
        "cpu_over_trip_us": minus(cpu),
        "miss_over_trip": ratio(wall),
        "cpu_miss_over_trip": ratio(cpu),
        "misses": misses,
        "per_round_s": {"wall": wall, "cpu": cpu},
    }


def render_miss(r: dict[str, Any]) -> list[str]:
    return [
        "### Small misses against the round trip they wrap (SDK `mcp.Client`, in-process FastMCP server)",
        "",
        f"{r['rounds']} rounds of {MISS_TRIPS} calls of each, alternating call by call; median [p10–p90] over the "
        "rounds of the per-round medians. The cache keeps nothing (`max_answer_bytes=1`): every call is a miss. "
        "CPU is this process's (client and in-process server), less disturbed by a loaded machine than wall time.",
        "",
        "| answer | measure | round trip, µs | miss, µs | miss minus round trip, µs | miss ÷ round trip | misses |",
        "|---|---|---|---|---|---|---|",
        f"| 1 KB ({r['answer_bytes']:,} B) | CPU | {show(r['cpu_us']['trip'], '{:.0f}')} "
        f"| {show(r['cpu_us']['miss'], '{:.0f}')} | {show(r['cpu_over_trip_us'], '{:.0f}')} "
        f"| {show(r['cpu_miss_over_trip'], '{:.3f}')} | {r['misses']} |",
        f"| | wall | {show(r['us']['trip'], '{:.0f}')} | {show(r['us']['miss'], '{:.0f}')} "
        f"| {show(r['over_trip_us'], '{:.0f}')} | {show(r['miss_over_trip'], '{:.3f}')} | |",
    ]


async def profile_calls(call: Call, runs: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(runs):
        await call()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
    return out.getvalue()


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def run(only: str | None, rounds: int | None, reps: int, quick: bool, profile: str | None) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine(), "load_before": _load(), "read_only_views": VIEWS}
    out = ["### Machine", "", *(f"- {k}: {v}" for k, v in results["machine"].items())]
    with open(os.devnull, "w") as errlog:  # noqa: ASYNC230 - /dev/null does not block
        if only in (None, "unchanged"):
            r = await unchanged(rounds or (4 if quick else 30), reps, errlog, profile == "unchanged")
            results["unchanged"] = r
            out += ["", *render_unchanged(r)]
        if only in (None, "fresh"):
            f = await fresh(rounds or (4 if quick else 20), profile == "fresh")
            results["fresh"] = f
            out += ["", *render_fresh(f)]
        if only in (None, "miss"):
            m = await miss(rounds or (4 if quick else 20), profile == "miss")
            results["miss"] = m
            out += ["", *render_miss(m)]
    results["load_after"] = _load()
    out += ["", f"Load average before: {results['load_before']}; after: {results['load_after']}."]
    print("\n".join(out))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", choices=("unchanged", "fresh", "miss"))
    parser.add_argument("--rounds", type=int, help="rounds per part (default 30 unchanged, 20 fresh)")
    parser.add_argument("--reps", type=int, default=5, help="calls of each cheap configuration per round")
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--profile", choices=("unchanged", "fresh", "miss"), help="print a cProfile of the cached path")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args()
    results = anyio.run(run, args.only, args.rounds, args.reps, args.quick, args.profile)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
