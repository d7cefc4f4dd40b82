"""What passing a result by reference saves the model, and what resolving a reference costs the host.

Three questions, on the issue's scenario (a 240-row hourly time series, about 18 KB of JSON, moved from a
query tool to a chart tool):

1. Writing: how many o200k tokens (and bytes) the model must generate to pass the rows to the next tool
   call inline, against passing an `mcp+cache://` reference (with and without a `#/rows` fragment).
   The reference is measured in the arguments of a real call: the query and chart servers run in process
   (FastMCP and the SDK's MCPServer), a `ToolCache` wraps both clients, and `call_for_model` mints and
   resolves; the chart server reports how many rows arrived.
2. Reading: the tokens of what the model reads of the query result, the full view against the view
   shortened to 4 KB with named markers, once and replayed over a 10-turn conversation.
3. Resolving: the host-side time to resolve a reference to a 10 MB payload from SQLite and from Redis
   (a redis-server this script starts on a free loopback port and stops by PID), median and p95 of N runs.

Run:  python benchmarks/by_reference.py              (about a minute)
      python benchmarks/by_reference.py --quick      (fewer runs; a smoke test, not for the docs)
      python benchmarks/by_reference.py --json out.json
It prints Markdown tables; docs/benchmarks.md holds a copy of one run and how to read it.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import fastmcp
import mcp
import orjson
from mcp.client._memory import InMemoryTransport
from mcp.server.mcpserver import MCPServer

from mcpcache.bench import byref
from mcpcache.bench.byref import ROWS, query_answer, time_series
from mcpcache.bench.common import machine, percentile
from mcpcache.client import ToolCache
from mcpcache.processes import RedisServer
from mcpcache.refs import References, call_for_model
from mcpcache.refs.uri import mint
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.stores import MemoryStore, RedisStore, SQLiteStore, Store, StoreLimits
from mcpcache.tokens import count_tokens

TITLE = "KSLC, 10 days"
CONVERSATION = "conv-42"
VIEW_BUDGET = 4096
REPLAY_TURNS = 10
URI_SAMPLES = 1000
BIG_BYTES = 10_000_000
RUNS = 30
WARMUP = 3
LIBRARIES = ("mcpcache", "mcp", "fastmcp", "orjson", "redis", "bpe-openai")


# --- the data and the two servers ---------------------------------------------------------------------


def query_server() -> fastmcp.FastMCP:
    server = fastmcp.FastMCP("query-server")

    @server.tool
    def query(station: str, hours: int = ROWS) -> dict[str, Any]:
        return query_answer(station, hours)

    install(server, ToolPolicies({"query": CachePolicy(ttl_ms=60_000)}))
    return server


def chart_server() -> MCPServer:
    server = MCPServer("chart-server")

    @server.tool()
    def plot(data: list[dict[str, Any]], title: str) -> dict[str, Any]:
        return {"title": title, "rows": len(data)}

    return server


# --- 1 and 2: what the model writes and reads -------------------------------------------------------------


def cost(text: str) -> dict[str, Any]:
    """`mcpcache.bench.byref.cost`, refusing estimates: the docs quote these figures as o200k counts."""
    counted = byref.cost(text)
    if counted["token_method"] != "o200k":
        raise SystemExit("the o200k tokenizer (bpe-openai) is not available; the token counts would be guesses")
    return counted


def model_json(arguments: dict[str, Any]) -> str:
    # Compact, as the host would pass the model's arguments on; a model that writes spaces pays more inline.
    return orjson.dumps(arguments).decode()


async def model_side() -> dict[str, Any]:
    rows = time_series()
    store = MemoryStore()
    cache = ToolCache(store)
    full = References(store, conversation_id=CONVERSATION)
    short = References(store, conversation_id=CONVERSATION, max_view_bytes=VIEW_BUDGET)
    async with (
        fastmcp.Client(query_server()) as query_client,
        mcp.Client(InMemoryTransport(chart_server())) as chart_client,
    ):
        query, chart = cache.wrap(query_client), cache.wrap(chart_client)
        asked = await call_for_model(query, "query", {"station": "KSLC"}, references=full)
        uri = asked.envelope["_cache_uri"]
        shortened = await call_for_model(query, "query", {"station": "KSLC"}, references=short)
        by_fragment = {"data_uri": uri + "#/rows", "title": TITLE}
        by_whole = {"data_uri": uri, "title": TITLE}
        plotted = await call_for_model(chart, "plot", by_fragment, references=full)
        if plotted.envelope.get("rows") != ROWS:
            raise SystemExit(f"the chart server did not get the {ROWS} rows: {plotted.envelope}")

    inline = {"data": rows, "title": TITLE}
    # The token is random, and random base64 splits into a varying number of tokens: sample many.
    uri_tokens = sorted(
        count_tokens(model_json({"data_uri": str(mint(CONVERSATION)), "title": TITLE})).count
        for _ in range(URI_SAMPLES)
    )
    uuid_conversation = "6f1c2a9e-3b7d-4c55-9a10-2e8f4d7b1c03"
    uuid_tokens = sorted(
        count_tokens(model_json({"data_uri": str(mint(uuid_conversation)) + "#/rows", "title": TITLE})).count
        for _ in range(URI_SAMPLES)
    )
    full_view = json.dumps(asked.envelope, ensure_ascii=False, separators=(",", ":"))
    short_view = json.dumps(shortened.envelope, ensure_ascii=False, separators=(",", ":"))
    plain = json.dumps(asked.view.envelope if asked.view else {}, ensure_ascii=False, separators=(",", ":"))
    no_uri = json.dumps(
        {k: v for k, v in asked.envelope.items() if k != "_cache_uri"}, ensure_ascii=False, separators=(",", ":")
    )
    assert plain == full_view
    return {
        "rows_json_bytes": len(orjson.dumps(rows)),
        "write": {
            "inline": cost(model_json(inline)),
            "reference": cost(model_json(by_whole)),
            "reference_fragment": cost(model_json(by_fragment)),
            "uri_only": cost(uri),
            "uri_fragment_only": cost(uri + "#/rows"),
        },
        "uri_token_samples": {
            "conv-42 no fragment": {
                "median": statistics.median(uri_tokens),
                "max": uri_tokens[-1],
                "min": uri_tokens[0],
            },
            "uuid conversation with fragment": {
                "median": statistics.median(uuid_tokens),
                "max": uuid_tokens[-1],
                "min": uuid_tokens[0],
            },
        },
        "read": {
            "without mcpcache": cost(no_uri),
            "full view": cost(full_view),
            "shortened view": cost(short_view),
        },
        "example_uri": uri,
        "shortened_view": shortened.envelope,
    }


# --- 3: resolving a 10 MB payload -------------------------------------------------------------------------


def big_payload() -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    size = 0
    station = 0
    while size < BIG_BYTES:
        chunk = time_series(f"ST{station:04d}", 24 * 28)
        rows.extend(chunk)
        size += len(orjson.dumps(chunk))
        station += 1
    return {"station": "many", "rows": rows}


async def timed(fn: Callable[[], Awaitable[object]], runs: int) -> dict[str, float]:
    for _ in range(WARMUP):
        await fn()
    samples = []
    # As timeit does: a collection landing in one sample says nothing about the code being timed.
    gc.disable()
    try:
        for _ in range(runs):
            start = time.perf_counter()
            await fn()
            samples.append((time.perf_counter() - start) * 1e3)
    finally:
        gc.enable()
    return {"median_ms": statistics.median(samples), "p95_ms": percentile(samples, 0.95), "runs": runs}


async def resolve_costs(store: Store, payload: dict[str, Any], runs: int) -> dict[str, Any]:
    refs = References(store, conversation_id=CONVERSATION)
    minted = []
    start = time.perf_counter()
    view = await refs.for_model(payload, server="query", tool="query", arguments={"station": "many"})
    minted.append((time.perf_counter() - start) * 1e3)
    assert view.uri is not None
    uri = str(view.uri)
    rows = len(payload["rows"])

    async def resolve_whole() -> None:
        resolution = await refs.resolve(tool="plot", arguments={"data_uri": uri, "title": TITLE})
        assert resolution.arguments is not None

    async def resolve_rows() -> None:
        resolution = await refs.resolve(tool="plot", arguments={"data_uri": uri + "#/rows", "title": TITLE})
        assert resolution.arguments is not None
        assert len(resolution.arguments["data"]) == rows

    key = "r:" + view.uri.token  # the payload's key (mcpcache.refs.references._payload_key)

    async def load_only() -> None:
        assert await store.load(key) is not None

    item = await store.load(key)
    assert item is not None
    body = item.body

    async def decode_only() -> None:
        orjson.loads(body)

    return {
        "payload_bytes": view.size_bytes,
        "payload_tokens": view.tokens.count,
        "for_model_ms": minted[0],
        "store_load": await timed(load_only, runs),
        "decode": await timed(decode_only, runs),
        "resolve_whole": await timed(resolve_whole, runs),
        "resolve_rows": await timed(resolve_rows, runs),
    }


async def host_side(runs: int, redis_binary: str | None) -> dict[str, Any]:
    payload = big_payload()
    out: dict[str, Any] = {"rows": len(payload["rows"])}
    out["memory"] = await resolve_costs(MemoryStore(StoreLimits(max_bytes=64 * 1024 * 1024)), payload, runs)
    with tempfile.TemporaryDirectory() as folder:
        sqlite_store = SQLiteStore(Path(folder) / "refs.db")
        try:
            out["sqlite"] = await resolve_costs(sqlite_store, payload, runs)
        finally:
            await sqlite_store.close()
    if redis_binary is None:
        out["redis"] = None
        return out
    with RedisServer(redis_binary) as server:
        redis_store = RedisStore(server.url, namespace="bench")
        try:
            out["redis"] = await resolve_costs(redis_store, payload, runs)
        finally:
            await redis_store.close()
    return out


# --- the report -------------------------------------------------------------------------------------------


def fewer(part: int, whole: int) -> str:
    return f"{100 * (1 - part / whole):.2f} %"


def render(info: dict[str, str], model: dict[str, Any], host: dict[str, Any]) -> str:
    lines = ["### Machine", ""]
    lines += [f"- {key}: {value}" for key, value in info.items()]
    write = model["write"]
    inline = write["inline"]
    lines += [
        "",
        f"**What the model writes to pass the {ROWS} rows ({model['rows_json_bytes']:,} bytes of JSON) to `plot`**",
        "",
        "| the model writes | bytes | o200k tokens | fewer tokens than inline |",
        "|---|---|---|---|",
        f'| inline: `{{"data": [...{ROWS} rows], "title": ...}}` | {inline["bytes"]:,} | {inline["tokens"]:,} | — |',
    ]
    for label, key in (
        ('by reference: `{"data_uri": "mcp+cache://conv-42/<token>", "title": ...}`', "reference"),
        ('by reference with a fragment: `{"data_uri": ".../<token>#/rows", "title": ...}`', "reference_fragment"),
        ("the URI alone", "uri_only"),
        ("the URI with `#/rows` alone", "uri_fragment_only"),
    ):
        row = write[key]
        lines.append(f"| {label} | {row['bytes']:,} | {row['tokens']:,} | {fewer(row['tokens'], inline['tokens'])} |")
    samples = model["uri_token_samples"]
    lines += [
        "",
        f"**The token varies: o200k tokens of the reference arguments over {URI_SAMPLES:,} minted URIs**",
        "",
        "| arguments | min | median | max | fewer than inline, at the max |",
        "|---|---|---|---|---|",
    ]
    for label, row in samples.items():
        lines.append(
            f"| {label} | {row['min']} | {row['median']:g} | {row['max']} | {fewer(row['max'], inline['tokens'])} |"
        )
    read = model["read"]
    lines += [
        "",
        "**What the model reads of the query result**",
        "",
        f"| view | bytes | o200k tokens | replayed over {REPLAY_TURNS} turns |",
        "|---|---|---|---|",
    ]
    for label, row in read.items():
        lines.append(f"| {label} | {row['bytes']:,} | {row['tokens']:,} | {row['tokens'] * REPLAY_TURNS:,} |")
    lines += [
        "",
        "The shortened view, as the model sees it:",
        "",
        "```json",
        json.dumps(model["shortened_view"], ensure_ascii=False, indent=1),
        "```",
    ]
    lines += [
        "",
        f"**Resolving a reference to a {host['memory']['payload_bytes'] / 1e6:.1f} MB payload "
        f"({host['rows']:,} rows), ms**",
        "",
        "| store | `for_model` once (store + count tokens) | `store.load` median / p95 | `orjson.loads` of the body "
        "| resolve whole, median / p95 | resolve `#/rows`, median / p95 | runs |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ("memory", "sqlite", "redis"):
        row = host.get(name)
        if row is None:
            lines.append(f"| {name} | not run (no redis-server) | | | | | |")
            continue
        cells = [
            f"{row[k]['median_ms']:.1f} / {row[k]['p95_ms']:.1f}"
            for k in ("store_load", "decode", "resolve_whole", "resolve_rows")
        ]
        lines.append(f"| {name} | {row['for_model_ms']:.0f} | {' | '.join(cells)} | {row['resolve_rows']['runs']} |")
    return "\n".join(lines)


async def run(quick: bool, redis_binary: str | None) -> dict[str, Any]:
    runs = 5 if quick else RUNS
    info = machine(libraries=LIBRARIES)
    info["redis_server"] = RedisServer(redis_binary).version() if redis_binary is not None else "not found"
    model = await model_side()
    host = await host_side(runs, redis_binary)
    print(render(info, model, host))
    return {"machine": info, "model": model, "host": host}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="5 runs instead of 30 (smoke test)")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "/usr/bin/redis-server")
    args = parser.parse_args()
    binary = args.redis_server if args.redis_server and Path(args.redis_server).exists() else None
    results = anyio.run(run, args.quick, binary)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
