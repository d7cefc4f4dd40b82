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
import importlib.metadata
import json
import math
import os
import platform
import shutil
import socket
import sqlite3
import statistics
import subprocess
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

from mcpcache.client import ToolCache
from mcpcache.refs import References
from mcpcache.refs.uri import mint
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.stores import MemoryStore, RedisStore, SQLiteStore, Store, StoreLimits
from mcpcache.tokens import count_tokens

ROWS = 240
TITLE = "KSLC, 10 days"
CONVERSATION = "conv-42"
VIEW_BUDGET = 4096
REPLAY_TURNS = 10
URI_SAMPLES = 1000
BIG_BYTES = 10_000_000
RUNS = 30
WARMUP = 3


# --- the data and the two servers ---------------------------------------------------------------------


def time_series(station: str = "KSLC", hours: int = ROWS) -> list[dict[str, Any]]:
    """The tests' series (tests/refs/servers.py): hourly readings, about 75 bytes of JSON a row."""
    rows = []
    for hour in range(hours):
        day, hh = divmod(hour, 24)
        rows.append(
            {
                "t": f"2026-03-{day % 28 + 1:02d}T{hh:02d}:00:00Z",
                "temp_c": round(8 + 7 * math.sin(hour / 24 * 2 * math.pi) + (hour % 7) * 0.13, 2),
                "rh_pct": round(55 + 20 * math.cos(hour / 24 * 2 * math.pi), 1),
                "station": station,
            }
        )
    return rows


def query_server() -> fastmcp.FastMCP:
    server = fastmcp.FastMCP("query-server")

    @server.tool
    def query(station: str, hours: int = ROWS) -> dict[str, Any]:
        return {"station": station, "unit": {"temp_c": "°C", "rh_pct": "%"}, "rows": time_series(station, hours)}

    install(server, ToolPolicies({"query": CachePolicy(ttl_ms=60_000)}))
    return server


def chart_server() -> MCPServer:
    server = MCPServer("chart-server")

    @server.tool()
    def plot(data: list[dict[str, Any]], title: str) -> dict[str, Any]:
        return {"title": title, "rows": len(data)}

    return server


# --- 1 and 2: what the model writes and reads -------------------------------------------------------------


def cost(text: str) -> dict[str, int]:
    counted = count_tokens(text)
    if counted.method != "o200k":
        raise SystemExit("the o200k tokenizer (bpe-openai) is not available; the token counts would be guesses")
    return {"bytes": len(text.encode()), "tokens": counted.count}


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
        asked = await query.call_for_model("query", {"station": "KSLC"}, references=full)
        uri = asked.envelope["_cache_uri"]
        shortened = await query.call_for_model("query", {"station": "KSLC"}, references=short)
        by_fragment = {"data_uri": uri + "#/rows", "title": TITLE}
        by_whole = {"data_uri": uri, "title": TITLE}
        plotted = await chart.call_for_model("plot", by_fragment, references=full)
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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisProcess:
    """A redis-server without persistence on a free loopback port, stopped by its PID."""

    def __init__(self, binary: str) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [binary, "--save", "", "--appendonly", "no", "--port", str(self.port), "--bind", "127.0.0.1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"*1\r\n$4\r\nPING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit("redis-server did not start")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, 15)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, 9)
                self.process.wait(timeout=10)


def percentile(samples: list[float], q: float) -> float:
    """Nearest rank: the smallest sample at or above the q-th fraction of them."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


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
    server = RedisProcess(redis_binary)
    try:
        redis_store = RedisStore(server.url, namespace="bench")
        try:
            out["redis"] = await resolve_costs(redis_store, payload, runs)
        finally:
            await redis_store.close()
    finally:
        server.stop()
    return out


# --- the report -------------------------------------------------------------------------------------------


def machine(redis_binary: str | None) -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        first = Path("/proc/cpuinfo").read_text().split("\n\n", 1)[0]
        info = dict(line.split(":", 1) for line in first.splitlines() if ":" in line)
        info = {k.strip(): v.strip() for k, v in info.items()}
        if "model name" in info:
            cpu = f"{info['model name']} (family {info.get('cpu family', '?')}, model {info.get('model', '?')})"
    except OSError:
        pass
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}"
        for name in ("mcpcache", "mcp", "fastmcp", "orjson", "redis", "bpe-openai")
    )
    redis_version = "not found"
    if redis_binary is not None:
        redis_version = subprocess.run([redis_binary, "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "os": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
        "redis_server": redis_version,
        "libraries": versions,
    }


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
    info = machine(redis_binary)
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
