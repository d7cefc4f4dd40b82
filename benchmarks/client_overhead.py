"""What the client half costs and saves: fresh hits, revalidated reads, and memory under a bounded store.

Four questions, each answered by measuring (never by asserting):

1. Fresh hit against a round trip. The same tool result (about 1 KB and 100 KB) asked for through
   `ToolCache.wrap(client).call_tool(...)` while the stored copy is fresh (MemoryStore and SQLiteStore),
   against a plain `client.call_tool(...)` to an in-process server over the SDK's in-memory transport
   (`mcp.client._memory.InMemoryTransport`) and over FastMCP's in-memory client. Median and p95 per
   call, the ratio, and where a fresh hit's time goes (each step of the shipped driver timed alone: one
   `Store.load_many` of the entry and the freshness mark, the entry check, `decode_result`). Target: a
   fresh hit at least 100x faster than the round trip.
2. Revalidated read against a full read. `read_notebook` of a 5 MB notebook from
   `python -m mcpcache demo-server` in a subprocess, over stdio and over streamable HTTP on 127.0.0.1,
   with the tool body still running (the server hashes its answer) and with `--validator` (the body is
   skipped). End-to-end median and p95, and the bytes each read puts on the wire, counted at the
   client's transport (mcpcache.wire_count). A revalidated answer is checked against the tool's output
   schema only the first time this process serves it (ToolCache's memo), so two revalidated reads are
   timed: the steady state, and a first serve (the memo cleared first), which pays that check. Target:
   a revalidated read at least 3x faster end to end.
3. Peak memory while 2 GiB of results pass through a MemoryStore bounded at 256 MiB, in fresh
   subprocesses (benchmarks/client_overhead_memory.py), with and without MALLOC_MMAP_THRESHOLD_=131072.
   Target: peak RSS < 256 MiB + 150 MiB.
4. What the stores' integrity features cost (`--only integrity`, not part of the default run): on the 5 MB
   notebook's stored answer (about 10 MB), in MemoryStore, SQLiteStore (a temp file) and RedisStore (a
   private redis-server on a free loopback port, started and stopped by this script), the xxh3_64 checksum
   (`body_checksum`) against the `load_many` that verifies it and a whole fresh hit through `ToolCache`,
   and against a `save` that computes it; and `update_meta` with compare-and-set (`if_tag`, `stamp`)
   against without. Configurations are interleaved in rounds (order shuffled per round); medians and
   per-round ratios with their spread.

5. Large answers (`--only large`, not part of the default run): the 5 MB notebook (a ~10 MB stored answer)
   read in full over streamable HTTP against fresh hits (MemoryStore, SQLiteStore), interleaved in rounds
   with per-round ratios; tracemalloc's peak per revalidated read; a fresh hit of a ~20 MB stored answer,
   SQLiteStore against MemoryStore; and `SQLiteStore.load_many` of 1/5/10/20 MB bodies.

Run:  python benchmarks/client_overhead.py            (about three minutes)
      python benchmarks/client_overhead.py --quick    (fewer runs; a smoke test, not for the docs)
      python benchmarks/client_overhead.py --json out.json
      python benchmarks/client_overhead.py --only fresh|reads|memory|integrity|large
      python benchmarks/client_overhead.py --profile  (also print a cProfile of the fresh-hit path)
It prints Markdown tables; docs/benchmarks.md holds a copy of one run and how to read it.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import json
import os
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

import anyio
import fastmcp
import mcp
import mcp_types as mt
from fastmcp import FastMCP
from mcp import StdioServerParameters
from mcp.client._memory import InMemoryTransport
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ToolAnnotations
from typing_extensions import TypedDict

import mcpcache
from mcpcache.bench.common import machine, percentile
from mcpcache.client import ToolCache
from mcpcache.client.entries import decode_result, encode_result
from mcpcache.client.keys import CallIdentity
from mcpcache.client.policy import EntryMeta, decide_lookup
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.processes import RedisServer, free_port, stop_process, wait_until_listening
from mcpcache.protocol import MAX_TTL_MS, META_KEY, conditional_request_meta
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.stores import MemoryStore, SQLiteStore, Store
from mcpcache.stores.items import Item, StoreLimits, body_checksum
from mcpcache.stores.redis import RedisStore
from mcpcache.wire_count import CountingTransport, WireLog, WireRecord

MB = 1_000_000
MiB = 1024 * 1024
RESULT_SIZES = (("1 KB", 1_000), ("100 KB", 100_000))
FRESH_RUNS = 3000
"""Timed fresh hits per configuration and size."""
TRIP_RUNS = {1_000: 600, 100_000: 200}
"""Timed round trips per size."""
ROUNDS = 5
"""Every configuration's runs are split into this many blocks, taken in turn, so drift hits all alike."""
WARMUP = 20
READ_RUNS = 10
NOTEBOOK_BYTES = 5 * MB
DEMO_TTL_S = 5.0
MEMORY_SCRIPT = Path(__file__).resolve().parent / "client_overhead_memory.py"
MMAP_ENV = "MALLOC_MMAP_THRESHOLD_"

LIBRARIES = (
    "mcpcache",
    "mcp",
    "fastmcp",
    "pydantic",
    "pydantic-core",
    "orjson",
    "cachetools",
    "uvicorn",
    "xxhash",
    "redis",
)

ClientKind = Literal["mcp", "fastmcp"]


# --- the machine ------------------------------------------------------------------------------------


def mcpcache_source() -> str:
    """Where the mcpcache being measured was imported from, and at which commit."""
    source = Path(mcpcache.__file__).resolve().parent
    try:
        git = ["git", "-C", str(source)]
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "."], capture_output=True, text=True, check=True)
        revision = commit.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        revision = "not a git checkout"
    return f"{source} ({revision})"


# --- statistics -----------------------------------------------------------------------------------------


@dataclass
class Stat:
    median_us: float
    p95_us: float
    runs: int

    @classmethod
    def of(cls, samples: list[float]) -> Stat:
        return cls(statistics.median(samples) * 1e6, percentile(samples, 0.95) * 1e6, len(samples))


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    # As timeit does: a collection landing in one sample says nothing about the code being timed.
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# --- 1. fresh hit against a round trip --------------------------------------------------------------------


class Row(TypedDict):
    id: int
    name: str
    score: float
    tags: list[str]
    note: str


class Table(TypedDict):
    kind: str
    rows: list[Row]


_WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma", "omega")


def _rows(count: int) -> list[Row]:
    rng = random.Random(11)
    return [
        {
            "id": i,
            "name": f"item-{i:05d}",
            "score": round(rng.random() * 100, 4),
            "tags": rng.sample(_WORDS, 2),
            "note": " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 8))),
        }
        for i in range(count)
    ]


def build_table_server() -> FastMCP:
    """A FastMCP server with one read-only tool whose answer is `rows` table rows, stamped by mcpcache.

    The rows are built once, so a round trip times the SDK, FastMCP and mcpcache's stamping, not the
    benchmark's own data generation. The answer goes out as FastMCP sends every structured answer: a
    text block holding its JSON plus the same object as structuredContent.
    """
    server = FastMCP("client-overhead")
    data = _rows(5_000)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def table(rows: int) -> Table:
        """The first `rows` rows of a table."""
        return {"kind": "table", "rows": data[:rows]}

    # A day of freshness: every cached call in the timed loops is a fresh hit.
    install(server, ToolPolicies({"table": CachePolicy(ttl_ms=MAX_TTL_MS, kind="table")}))
    return server


@dataclass
class FreshRow:
    size: str
    result_bytes: int
    rows: int
    client: str
    round_trip: Stat
    memory_hit: Stat
    sqlite_hit: Stat
    not_fresh: int
    """Cached calls in the timed loops that were not fresh hits (should be 0)."""


@dataclass
class Breakdown:
    """Each step of a fresh hit timed alone (median of 1,000 calls each), on the entry that was served."""

    size: str
    client: str
    total_us: float
    """The fresh hit through the wrapper (median of the timed loop)."""
    driver_us: float
    """`ToolCache.execute` alone, with a stub connection: the fresh hit without any wrapper."""
    key_us: float
    """A new `CallIdentity`, its canonical arguments (once), the entry key and the freshness-mark key."""
    memory_load_us: float
    """One `MemoryStore.load_many` of the entry and the freshness mark, as the driver's lookup does."""
    sqlite_load_us: float
    """The same `load_many` on SQLiteStore: one thread hop for both."""
    thread_hop_us: float
    """One `anyio.to_thread.run_sync` of a function that does nothing: what SQLiteStore pays per call."""
    decide_us: float
    decode_us: float
    """`mcpcache.client.cache.decode_result`: `pydantic_core.from_json`, then `CallToolResult.model_validate`."""
    data_parse_us: float
    """FastMCP only: turning the result into `.data` (a round trip pays it too)."""

    @property
    def driver_rest_us(self) -> float:
        return self.driver_us - self.key_us - self.memory_load_us - self.decide_us - self.decode_us

    @property
    def wrapper_us(self) -> float:
        return self.total_us - self.driver_us - self.data_parse_us


async def timed(call: Callable[[], Awaitable[object]], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return samples


async def interleaved(arms: dict[str, Callable[[], Awaitable[object]]], runs: dict[str, int]) -> dict[str, list[float]]:
    """Warm every arm up, then time them in ROUNDS blocks taken in turn."""
    for call in arms.values():
        for _ in range(WARMUP):
            await call()
    samples: dict[str, list[float]] = {name: [] for name in arms}
    with gc_paused():
        for _ in range(ROUNDS):
            for name, call in arms.items():
                samples[name] += await timed(call, max(1, runs[name] // ROUNDS))
    return samples


@contextlib.asynccontextmanager
async def in_memory_client(kind: ClientKind, server: FastMCP) -> AsyncIterator[Any]:
    if kind == "mcp":
        # InMemoryTransport takes an MCPServer or a low-level Server; FastMCP's is the private _mcp_server.
        async with mcp.Client(InMemoryTransport(server._mcp_server), mode="auto") as client:
            yield client
    else:
        async with fastmcp.Client(server, mode="auto") as client:
            yield client


async def calibrate_rows(server: FastMCP, target: int) -> tuple[int, int]:
    """How many rows make the SDK serialisation of the answer about `target` bytes, and its size."""

    async def size_of(rows: int) -> int:
        async with in_memory_client("mcp", server) as client:
            return len(encode_result(await client.call_tool("table", {"rows": rows})))

    base, per_hundred = await size_of(0), await size_of(100)
    rows = max(1, round((target - base) * 100 / (per_hundred - base)))
    return rows, await size_of(rows)


def _call(target: Any, args: dict[str, Any]) -> Callable[[], Awaitable[object]]:
    async def call() -> object:
        return await target.call_tool("table", args)

    return call


async def fresh_row(
    server: FastMCP, label: str, target: int, kind: ClientKind, tmp: Path, quick: bool, profile: bool
) -> tuple[FreshRow, Breakdown, str]:
    rows, result_bytes = await calibrate_rows(server, target)
    args = {"rows": rows}
    divisor = 10 if quick else 1
    async with in_memory_client(kind, server) as client:
        await client.list_tools()
        caches = {
            "m": ToolCache(MemoryStore()),
            "s": ToolCache(SQLiteStore(tmp / f"{kind}-{target}.db")),
        }
        views = {name: cache.wrap(client) for name, cache in caches.items()}
        for view in views.values():
            await view.call_tool("table", args)  # the miss that stores the entry
        arms = {
            "trip": _call(client, args),
            "m": _call(views["m"], args),
            "s": _call(views["s"], args),
        }
        hits = FRESH_RUNS // divisor
        runs = {"trip": max(10, TRIP_RUNS[target] // divisor), "m": hits, "s": hits}
        samples = await interleaved(arms, runs)
        # Every cached call after the one that stored the entry should have been a fresh hit.
        not_fresh = sum(c.stats.calls - 1 - c.stats.fresh_hits for c in caches.values())
        row = FreshRow(
            size=label,
            result_bytes=result_bytes,
            rows=rows,
            client=kind,
            round_trip=Stat.of(samples["trip"]),
            memory_hit=Stat.of(samples["m"]),
            sqlite_hit=Stat.of(samples["s"]),
            not_fresh=not_fresh,
        )
        parts = await breakdown(label, kind, client, views["m"], caches["m"], caches["s"], args, row.memory_hit)
        profile_text = ""
        if profile:
            profile_text = f"\n#### cProfile, fresh hit, {label}, {kind} client, MemoryStore\n\n"
            profile_text += await profile_calls(arms["m"], 2000 // divisor)
        await caches["s"].store.close()
    return row, parts, profile_text


async def fresh_rows(quick: bool, profile: bool) -> tuple[list[FreshRow], list[Breakdown], str]:
    server = build_table_server()
    rows: list[FreshRow] = []
    breakdowns: list[Breakdown] = []
    profiles = ""
    with tempfile.TemporaryDirectory(prefix="mcpcache-bench-") as tmp:
        for label, target in RESULT_SIZES:
            for kind in ("mcp", "fastmcp"):
                print(f"fresh hits: {label}, {kind} client...", file=sys.stderr)
                row, parts, text = await fresh_row(server, label, target, kind, Path(tmp), quick, profile)
                rows.append(row)
                breakdowns.append(parts)
                profiles += text
    return rows, breakdowns, profiles


class _StubConnection:
    """A connection that is never used: the entry is fresh, so the driver sends nothing."""

    timeout_s: float | None = None

    def __init__(self, server_id: str, era: str) -> None:
        self.server_id, self.era = server_id, era

    async def send(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None, timeout_s: float | None
    ) -> CallToolResult | None:
        raise AssertionError("a fresh hit sent a request")

    async def send_plain(self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None) -> CallToolResult:
        raise AssertionError("a fresh hit sent a request")

    async def send_conditional(self, name: str, arguments: dict[str, Any], meta: dict[str, Any]) -> None:
        raise AssertionError("a fresh hit sent a request")

    async def validate(self, name: str, result: CallToolResult) -> None:
        return None

    async def read_only(self, name: str) -> bool | None:
        return True

    async def idempotent(self, name: str) -> bool | None:
        return True

    async def declarations(self) -> Mapping[str, Any] | None:
        return None


async def breakdown(
    label: str,
    kind: ClientKind,
    client: Any,
    view: Any,
    memory: ToolCache,
    sqlite: ToolCache,
    args: dict[str, Any],
    total: Stat,
) -> Breakdown:
    """Each step of a fresh hit timed alone, on the entry the timed loop served (the steps of
    `ToolCache.execute` and its `_look` / `_serve_fresh`, as shipped)."""
    era = client.session.protocol_version or "unknown"
    identity = CallIdentity(view.server_id, memory.partition, era, "table", args)
    key, mark = identity.key("private"), identity.mark_key()
    keys = [key, mark]
    item = await memory.store.load(key)
    assert item is not None, "the fresh entry is not in the store"
    body = item.body
    conn = _StubConnection(view.server_id, era)
    runs = 1000

    def sync_us(fn: Callable[[], object]) -> float:
        for _ in range(WARMUP):
            fn()
        samples = []
        with gc_paused():
            for _ in range(runs):
                start = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - start)
        return statistics.median(samples) * 1e6

    async def async_us(fn: Callable[[], Awaitable[object]]) -> float:
        for _ in range(WARMUP):
            await fn()
        with gc_paused():
            return Stat.of(await timed(fn, runs)).median_us

    def hash_keys() -> object:
        # The driver builds a new identity per call; its canonical arguments are computed once, then reused.
        fresh = CallIdentity(view.server_id, memory.partition, era, "table", args)
        return fresh.key("private"), fresh.mark_key()

    async def load(store: Store) -> None:
        items = await store.load_many(keys)
        assert items[0] is not None

    def decide() -> object:
        entry = EntryMeta.from_json(item.meta)
        assert entry is not None
        return decide_lookup("use", entry, time.time(), None)

    async def driver() -> object:
        result, outcome = await memory.execute(conn, "table", args)
        assert outcome.status == "fresh_hit"
        return result

    data_parse = 0.0
    if kind == "fastmcp":
        result = decode_result(body)
        assert result is not None

        async def parse() -> object:
            return await client._parse_call_tool_result("table", result)

        data_parse = await async_us(parse)
    return Breakdown(
        size=label,
        client=kind,
        total_us=total.median_us,
        driver_us=await async_us(driver),
        key_us=sync_us(hash_keys),
        memory_load_us=await async_us(lambda: load(memory.store)),
        sqlite_load_us=await async_us(lambda: load(sqlite.store)),
        thread_hop_us=await async_us(lambda: anyio.to_thread.run_sync(lambda: None)),
        decide_us=sync_us(decide),
        decode_us=sync_us(lambda: decode_result(body)),
        data_parse_us=data_parse,
    )


async def profile_calls(call: Callable[[], Awaitable[object]], runs: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(runs):
        await call()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
    return "```\n" + out.getvalue().strip() + "\n```\n"


# --- 2. revalidated read against a full read -------------------------------------------------------------


@dataclass
class Traffic:
    sent: int
    received: int
    messages: int


@dataclass
class ReadRow:
    transport: str
    server: str
    era: str
    full: Stat
    revalidated: Stat
    """Steady state: the stored answer was already checked against the output schema in this process."""
    first_serve: Stat
    """A revalidated read after `ToolCache.forget_validations()`: it pays the output-schema check."""
    miss_through_cache: Stat
    full_traffic: Traffic
    revalidated_traffic: Traffic
    statuses: dict[str, int] = field(default_factory=dict)
    first_serve_statuses: dict[str, int] = field(default_factory=dict)
    same_answer: bool = False
    parts: ReadParts | None = None


@dataclass
class ReadParts:
    """The pieces of a revalidated read, each timed alone (median of READ_PARTS_RUNS)."""

    conditional_us: float
    """The conditional call and its not-modified reply, sent as the wrapper sends it."""
    decode_us: float
    """`decode_result` of the stored answer (`pydantic_core.from_json`, then `CallToolResult.model_validate`)."""
    validate_us: float
    """`ClientSession.validate_tool_result` of the stored answer against the tool's output schema: what a
    first serve pays on top of the steady state."""
    stored_bytes: int


class ShiftedClock:
    """The cache's clock, moved past the demo server's 5 s freshness before each revalidated read."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def expire(self) -> None:
        self.offset += DEMO_TTL_S + 1


def _traffic(records: list[WireRecord], http: bool) -> Traffic:
    # Counted as stdio frames each message (JSON + newline); an HTTP body has no newline.
    adjust = 1 if http else 0
    sent = sum(r.nbytes - adjust for r in records if r.direction == "sent")
    received = sum(r.nbytes - adjust for r in records if r.direction == "received")
    return Traffic(sent, received, len(records))


@contextlib.contextmanager
def http_demo_server(directory: Path, flags: list[str], errlog: TextIO) -> Iterator[str]:
    """`mcpcache demo-server --http PORT` in a subprocess; stopped by its PID on the way out."""
    port = free_port()
    command = [sys.executable, "-m", "mcpcache", "demo-server", "--dir", str(directory), "--http", str(port), *flags]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=errlog, stderr=errlog)
    try:
        wait_until_listening(process, port, 60, "the demo server")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_process(process)


@contextlib.asynccontextmanager
async def demo_client(
    transport: str, directory: Path, flags: list[str], log: WireLog, errlog: TextIO
) -> AsyncIterator[mcp.Client]:
    if transport == "stdio":
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "mcpcache", "demo-server", "--dir", str(directory), *flags]
        )
        # The SDK's stdio client starts this server and stops it when the client closes.
        async with mcp.Client(CountingTransport(stdio_client(params, errlog=errlog), log), mode="auto") as client:
            yield client
    else:
        with http_demo_server(directory, flags, errlog) as url:
            inner = streamable_http_client(url)
            async with mcp.Client(CountingTransport(inner, log), mode="auto") as client:
                yield client


async def read_row(
    transport: str, server: str, flags: list[str], directory: Path, name: str, runs: int, errlog: TextIO
) -> ReadRow:
    # Deferred: each message is measured after the timed call, so a full read does not also pay for
    # serialising its 9.75 MB reply a second time to count it.
    log = WireLog(deferred=True)
    async with demo_client(transport, directory, flags, log, errlog) as client:
        era = str(client.session.protocol_version)
        await client.list_tools()  # the SDK fetches schemas before validating; keep that out of every read
        clock = ShiftedClock()
        cache = ToolCache(MemoryStore(), clock=clock)
        view = cache.wrap(client)
        args = {"path": name}
        full_answer = await client.call_tool("read_notebook", args)  # warm-up, both ends
        await view.call_tool("read_notebook", args)  # the miss that stores the entry
        clock.expire()
        await view.call("read_notebook", args)  # the first serve, which checks the stored answer once
        full: list[float] = []
        revalidated: list[float] = []
        first_serve: list[float] = []
        miss: list[float] = []
        statuses: dict[str, int] = {}
        first_statuses: dict[str, int] = {}
        full_traffic = revalidated_traffic = Traffic(0, 0, 0)
        last: Any = None
        with gc_paused():
            for _ in range(runs):
                mark = log.mark()
                start = time.perf_counter()
                await client.call_tool("read_notebook", args)
                full.append(time.perf_counter() - start)
                full_traffic = _traffic(log.since(mark), transport == "http")

                clock.expire()
                mark = log.mark()
                start = time.perf_counter()
                call = await view.call("read_notebook", args)
                revalidated.append(time.perf_counter() - start)
                revalidated_traffic = _traffic(log.since(mark), transport == "http")
                statuses[call.outcome.status] = statuses.get(call.outcome.status, 0) + 1
                last = call.result

                # The same read as a process that has not served this answer yet: it checks it first.
                cache.forget_validations()
                clock.expire()
                start = time.perf_counter()
                call = await view.call("read_notebook", args)
                first_serve.append(time.perf_counter() - start)
                first_statuses[call.outcome.status] = first_statuses.get(call.outcome.status, 0) + 1

                start = time.perf_counter()
                await view.call("read_notebook", args, cache_mode="refresh")
                miss.append(time.perf_counter() - start)
                gc.collect()  # between reads, not inside one: each read starts from the same heap
        same = last is not None and last.structured_content == full_answer.structured_content
        parts = await read_parts(client, view, cache, era, args, full_answer)
    return ReadRow(
        transport=transport,
        server=server,
        era=era,
        full=Stat.of(full),
        revalidated=Stat.of(revalidated),
        first_serve=Stat.of(first_serve),
        miss_through_cache=Stat.of(miss),
        full_traffic=full_traffic,
        revalidated_traffic=revalidated_traffic,
        statuses=statuses,
        first_serve_statuses=first_statuses,
        same_answer=same,
        parts=parts,
    )


READ_PARTS_RUNS = 5


async def read_parts(
    client: mcp.Client, view: Any, cache: ToolCache, era: str, args: dict[str, Any], answer: CallToolResult
) -> ReadParts:
    tag = ((answer.meta or {}).get(META_KEY) or {}).get("etag")
    assert isinstance(tag, str), "the demo server stamped no tag"
    request = mt.CallToolRequest(
        params=mt.CallToolRequestParams(name="read_notebook", arguments=args, _meta=conditional_request_meta(tag))
    )
    key = CallIdentity(view.server_id, cache.partition, era, "read_notebook", args).key("private")
    item = await cache.store.load(key)
    assert item is not None, "the stored answer is gone"
    stored = decode_result(item.body)
    assert stored is not None

    async def median_us(fn: Callable[[], Awaitable[object]]) -> float:
        await fn()
        samples = []
        for _ in range(READ_PARTS_RUNS):
            start = time.perf_counter()
            await fn()
            samples.append(time.perf_counter() - start)
            gc.collect()
        return statistics.median(samples) * 1e6

    async def conditional() -> object:
        reply = await client.session.send_request(request, mt.CallToolResult)
        assert (reply.meta or {}).get(META_KEY, {}).get("notModified") is True
        return reply

    async def decode() -> object:
        return decode_result(item.body)

    async def validate() -> None:
        await client.session.validate_tool_result("read_notebook", stored)

    with gc_paused():
        return ReadParts(
            conditional_us=await median_us(conditional),
            decode_us=await median_us(decode),
            validate_us=await median_us(validate),
            stored_bytes=len(item.body),
        )


async def read_rows(quick: bool, errlog: TextIO) -> tuple[int, list[ReadRow]]:
    runs = 3 if quick else READ_RUNS
    with tempfile.TemporaryDirectory(prefix="mcpcache-bench-") as tmp:
        directory = Path(tmp)
        name = "read-5mb.ipynb"
        path = generate_notebook_of_size(directory / name, NOTEBOOK_BYTES, seed=5)
        rows = []
        for transport in ("stdio", "http"):
            for server, flags in (("tool runs, tag from the answer", []), ("validator, body skipped", ["--validator"])):
                print(f"notebook reads: {transport}, {server}...", file=sys.stderr)
                rows.append(await read_row(transport, server, flags, directory, name, runs, errlog))
        return path.stat().st_size, rows


# --- 3. peak memory under a bounded MemoryStore -------------------------------------------------------------


MEMORY_RUNS: tuple[tuple[str, str | None, str], ...] = (
    # (workload, MALLOC_MMAP_THRESHOLD_, variant)
    ("bare", None, "as-is"),
    ("bare", "131072", "as-is"),
    ("store", None, "as-is"),
    ("store", "131072", "as-is"),
    ("toolcache", None, "as-is"),
    ("toolcache", "131072", "as-is"),
    ("toolcache", None, "mallopt"),
    ("toolcache", None, "trim"),
)


def memory_rows(quick: bool) -> list[dict[str, Any]]:
    total = 256 * MiB if quick else 2 * 1024 * MiB
    rows = []
    for mode, threshold, variant in MEMORY_RUNS:
        env = {k: v for k, v in os.environ.items() if k != MMAP_ENV}
        if threshold is not None:
            env[MMAP_ENV] = threshold
        print(f"memory: {mode}, {MMAP_ENV}={threshold or 'unset'}, {variant}...", file=sys.stderr)
        command = [sys.executable, str(MEMORY_SCRIPT), mode, "--total-bytes", str(total), "--variant", variant]
        # Through a small shell that forks the child: exec'd straight from this (large) process, the child's
        # ru_maxrss would start at this process's size (Linux keeps the pre-exec peak).
        command = ["/bin/sh", "-c", '"$@"; exit $?', "sh", *command]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        row = json.loads(done.stdout)
        row["mmap_threshold"] = threshold
        rows.append(row)
    return rows


# --- 4. what checksums and compare-and-set cost, on the 5 MB notebook's stored answer ---------------------


INTEGRITY_ROUNDS = 30
"""Rounds of the integrity section: each round times every block once, the blocks in a shuffled order."""
INTEGRITY_BLOCKS = (("checksum", "load"), ("fresh",), ("save",), ("update", "update_cas"))
"""Per store, what is timed side by side: a block's configurations alternate call by call (ABBA...), so a
within-round ratio compares calls made moments apart."""
INTEGRITY_REPS = {"checksum": 5, "fresh": 3, "save": 3, "update": 25}
"""Calls of each configuration per block and round, by the block's first configuration; a round's value
for a configuration is the median of its calls."""
REDIS_SERVER = "/usr/bin/redis-server"


@dataclass
class Spread:
    """A statistic over rounds: the median and the p10-p90 and min-max of the per-round values."""

    median: float
    p10: float
    p90: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(
            statistics.median(values), percentile(values, 0.10), percentile(values, 0.90), min(values), max(values)
        )


@dataclass
class IntegrityStore:
    store: str
    load_ms: Spread
    """`store.load_many([entry_key, mark_key])`, as a fresh hit's lookup does (it verifies the checksum)."""
    fresh_ms: Spread
    """A fresh hit of `read_notebook` through `ToolCache.wrap(client).call(...)`, end to end."""
    update_ms: Spread
    """`update_meta(key, meta, expires_at)`: no compare-and-set."""
    update_cas_ms: Spread
    """`update_meta(key, meta, expires_at, if_tag=<the stored tag>, stamp=<now>)`, as a revalidation does."""
    save_ms: Spread
    """`save()` of the stored answer under a key of its own (replacing the previous round's copy)."""
    checksum_of_load: Spread
    """Per round: `body_checksum` ÷ `load_many`."""
    checksum_of_fresh: Spread
    """Per round: `body_checksum` ÷ the fresh hit."""
    checksum_of_save: Spread
    """Per round: `body_checksum` ÷ `save`."""
    cas_over_plain: Spread
    """Per round: `update_meta` with if_tag and stamp ÷ without."""
    cas_minus_plain_us: Spread
    """Per round: `update_meta` with if_tag and stamp − without, in µs."""
    not_fresh: int
    refused: int
    """Compare-and-set updates or saves the store refused (should be 0: every one carries the stored tag and
    a later stamp)."""


@dataclass
class IntegrityResult:
    notebook_bytes: int
    stored_bytes: int
    rounds: int
    reps: dict[str, int]
    checksum_ms: Spread
    stores: list[IntegrityStore]
    redis_version: str


class FrozenClock:
    """The cache's clock, stopped when the entries were stored: every lookup finds them fresh. The stores
    keep their own clocks (and Redis its server's), and the entries their 7-day keep-stale expiry."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def integrity_rows(quick: bool, errlog: TextIO) -> IntegrityResult:
    rounds = 6 if quick else INTEGRITY_ROUNDS
    rng = random.Random(7)
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcpcache-bench-")))
        name = "read-5mb.ipynb"
        notebook_bytes = generate_notebook_of_size(tmp / name, NOTEBOOK_BYTES, seed=5).stat().st_size
        redis_server = stack.enter_context(RedisServer(REDIS_SERVER))
        redis_version = next((w for w in redis_server.version().split() if w.startswith("v=")), "v=?")[2:]
        stores: dict[str, Store] = {
            "memory": MemoryStore(),
            "sqlite": SQLiteStore(tmp / "integrity.db"),
            "redis": RedisStore(redis_server.url, namespace="bench-integrity"),
        }
        try:
            async with demo_client("stdio", tmp, [], WireLog(deferred=True), errlog) as client:
                await client.list_tools()
                era = str(client.session.protocol_version)
                args = {"path": name}
                clock = FrozenClock()
                caches = {kind: ToolCache(store, clock=clock) for kind, store in stores.items()}
                views = {kind: cache.wrap(client) for kind, cache in caches.items()}
                keys: dict[str, tuple[str, str]] = {}
                entries: dict[str, Item] = {}
                for kind, view in views.items():
                    first = await view.call("read_notebook", args)  # the miss that stores the answer
                    assert first.outcome.status == "miss", first.outcome
                    identity = CallIdentity(view.server_id, caches[kind].partition, era, "read_notebook", args)
                    keys[kind] = (identity.key("private"), identity.mark_key())
                    item = await stores[kind].load(keys[kind][0])
                    assert item is not None, "the answer was not stored"
                    assert item.tag is not None, "the answer was stored without a tag"
                    entries[kind] = item
                body = entries["memory"].body
                assert all(e.body == body for e in entries.values()), "the stores hold different answers"
                not_fresh = dict.fromkeys(stores, 0)
                refused = dict.fromkeys(stores, 0)
                arms: dict[str, Callable[[], Awaitable[object]]] = {}
                for kind in stores:
                    arms.update(
                        _integrity_arms(
                            kind, stores[kind], views[kind], keys[kind], entries[kind], args, not_fresh, refused
                        )
                    )
                blocks = [tuple(f"{kind}:{arm}" for arm in block) for kind in stores for block in INTEGRITY_BLOCKS]
                per_round = await _integrity_rounds(arms, blocks, rounds, rng)
        finally:
            for store in stores.values():
                await store.close()
    results = []
    for kind in stores:
        checksum_rounds = per_round[f"{kind}:checksum"]

        def ms(arm: str, kind: str = kind) -> Spread:
            return Spread.of([v * 1e3 for v in per_round[f"{kind}:{arm}"]])

        def ratio(top: list[float], bottom: list[float]) -> Spread:
            return Spread.of([a / b for a, b in zip(top, bottom, strict=True)])

        plain, cas = per_round[f"{kind}:update"], per_round[f"{kind}:update_cas"]
        results.append(
            IntegrityStore(
                store=kind,
                load_ms=ms("load"),
                fresh_ms=ms("fresh"),
                update_ms=ms("update"),
                update_cas_ms=ms("update_cas"),
                save_ms=ms("save"),
                checksum_of_load=ratio(checksum_rounds, per_round[f"{kind}:load"]),
                checksum_of_fresh=ratio(checksum_rounds, per_round[f"{kind}:fresh"]),
                checksum_of_save=ratio(checksum_rounds, per_round[f"{kind}:save"]),
                cas_over_plain=ratio(cas, plain),
                cas_minus_plain_us=Spread.of([(c - p) * 1e6 for c, p in zip(cas, plain, strict=True)]),
                not_fresh=not_fresh[kind],
                refused=refused[kind],
            )
        )
    return IntegrityResult(
        notebook_bytes=notebook_bytes,
        stored_bytes=len(body),
        rounds=rounds,
        reps=dict(INTEGRITY_REPS),
        checksum_ms=Spread.of([v * 1e3 for kind in stores for v in per_round[f"{kind}:checksum"]]),
        stores=results,
        redis_version=redis_version,
    )


def _integrity_arms(
    kind: str,
    store: Store,
    view: Any,
    keys: tuple[str, str],
    entry: Item,
    args: dict[str, Any],
    not_fresh: dict[str, int],
    refused: dict[str, int],
) -> dict[str, Callable[[], Awaitable[object]]]:
    """The configurations timed on one store, each one call."""
    entry_key, mark_key = keys
    save_key = entry_key + ":integrity-save"
    tag = entry.tag
    body = entry.body

    async def checksum() -> object:
        # The bytes the load just verified, hashed alone: the part of `load_many` the checksum is.
        return body_checksum(body)

    async def load() -> object:
        items = await store.load_many([entry_key, mark_key])
        if items[0] is None:
            not_fresh[kind] += 1
        return items

    async def fresh() -> object:
        call = await view.call("read_notebook", args)
        if call.outcome.status != "fresh_hit":
            not_fresh[kind] += 1
        return call

    async def update() -> object:
        return await store.update_meta(entry_key, entry.meta, entry.expires_at)

    async def update_cas() -> object:
        admitted = await store.update_meta(entry_key, entry.meta, entry.expires_at, if_tag=tag, stamp=time.time())
        if not admitted:
            refused[kind] += 1
        return admitted

    async def save() -> object:
        now = time.time()
        item = Item(entry.meta, entry.body, entry.group, now, now + 3600, tag, now)
        stored = await store.save(save_key, item)
        if not stored:
            refused[kind] += 1
        return stored

    return {
        f"{kind}:checksum": checksum,
        f"{kind}:load": load,
        f"{kind}:fresh": fresh,
        f"{kind}:update": update,
        f"{kind}:update_cas": update_cas,
        f"{kind}:save": save,
    }


async def _integrity_rounds(
    arms: dict[str, Callable[[], Awaitable[object]]],
    blocks: list[tuple[str, ...]],
    rounds: int,
    rng: random.Random,
) -> dict[str, list[float]]:
    """Each round times every block once, the blocks in a shuffled order; within a block its arms alternate
    call by call, the order flipped every call. A round's value for an arm is the median of its calls."""
    for call in arms.values():
        for _ in range(2):
            await call()
    per_round: dict[str, list[float]] = {name: [] for name in arms}
    order = list(blocks)
    for index in range(rounds):
        print(f"integrity: round {index + 1} of {rounds}...", file=sys.stderr)
        rng.shuffle(order)
        gc.collect()  # between rounds, not inside one
        with gc_paused():
            for block in order:
                samples: dict[str, list[float]] = {name: [] for name in block}
                for rep in range(INTEGRITY_REPS[block[0].rpartition(":")[2]]):
                    for name in block if rep % 2 == 0 else reversed(block):
                        start = time.perf_counter()
                        await arms[name]()
                        samples[name].append(time.perf_counter() - start)
                for name, values in samples.items():
                    per_round[name].append(statistics.median(values))
    return per_round


# --- report ---------------------------------------------------------------------------------------------


def _us(value: float) -> str:
    return f"{value / 1000:.2f} ms" if value >= 1000 else f"{value:.1f} µs"


def _mib(kib: int) -> str:
    return f"{kib / 1024:.0f} MiB"


def _kb(n: int) -> str:
    return f"{n / MB:.2f} MB" if n >= MB else f"{n:,} B"


def render_fresh(rows: list[FreshRow], breakdowns: list[Breakdown]) -> list[str]:
    client_name = {"mcp": "SDK `mcp.Client`, InMemoryTransport", "fastmcp": "`fastmcp.Client`, in-memory"}
    out = [
        "### Fresh hit against a round trip: ratios (round-trip median ÷ fresh-hit median)",
        "",
        "| result | client | MemoryStore | SQLiteStore |",
        "|---|---|---|---|",
    ]
    for row in rows:
        trip = row.round_trip.median_us
        out.append(
            f"| {row.size} ({row.result_bytes:,} B) | {client_name[row.client]} "
            f"| **{trip / row.memory_hit.median_us:.0f}×** | **{trip / row.sqlite_hit.median_us:.0f}×** |"
        )
    out += [
        "",
        "### Fresh hit against a round trip: per call, median / p95",
        "",
        "| result | client | round trip | fresh hit, MemoryStore | fresh hit, SQLiteStore "
        "| N (trip / hit) | not fresh |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [row.round_trip, row.memory_hit, row.sqlite_hit]
        out.append(
            f"| {row.size} | {client_name[row.client]} | "
            + " | ".join(f"{_us(s.median_us)} / {_us(s.p95_us)}" for s in cells)
            + f" | {row.round_trip.runs} / {row.memory_hit.runs} | {row.not_fresh} |"
        )
    out += [
        "",
        "### Where a fresh hit's time goes, µs (each step timed alone, median of 1,000)",
        "",
        "| result | client | fresh hit through the wrapper | `ToolCache.execute` alone | identity and keys "
        "| `load_many` (entry + mark), MemoryStore | entry check | decode (`decode_result`) | rest of the driver "
        "| wrapper | `.data` (FastMCP) | `load_many`, SQLiteStore (one empty thread hop) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b in breakdowns:
        out.append(
            f"| {b.size} | {b.client} | {b.total_us:.1f} | {b.driver_us:.1f} | {b.key_us:.1f} "
            f"| {b.memory_load_us:.1f} | {b.decide_us:.1f} | {b.decode_us:.1f} | {b.driver_rest_us:.1f} "
            f"| {b.wrapper_us:.1f} | {b.data_parse_us:.1f} | {b.sqlite_load_us:.1f} ({b.thread_hop_us:.1f}) |"
        )
    return out


def render_reads(notebook_bytes: int, rows: list[ReadRow]) -> list[str]:
    out = [
        f"### Revalidated read against a full read: `read_notebook` of a {_kb(notebook_bytes)} notebook",
        "",
        "| transport | server | full ÷ revalidated (median) | full ÷ revalidated (p95) | full ÷ first serve (median) |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        out.append(
            f"| {row.transport} | {row.server} | **{row.full.median_us / row.revalidated.median_us:.1f}×** "
            f"| {row.full.p95_us / row.revalidated.p95_us:.1f}× "
            f"| {row.full.median_us / row.first_serve.median_us:.1f}× |"
        )
    out += [
        "",
        f"### Revalidated read against a full read: per read, median / p95 of {rows[0].full.runs if rows else 0}",
        "",
        "| transport | server | full read | revalidated read | revalidated read, first serve (checks the schema) "
        "| miss through the cache (`refresh`) "
        "| full read on the wire, sent / received | revalidated read on the wire, sent / received | outcomes "
        "| same answer |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        full, reval = row.full_traffic, row.revalidated_traffic
        outcomes = ", ".join(f"{k} {v}" for k, v in row.statuses.items())
        first = ", ".join(f"{k} {v}" for k, v in row.first_serve_statuses.items())
        out.append(
            f"| {row.transport} | {row.server} "
            f"| {_us(row.full.median_us)} / {_us(row.full.p95_us)} "
            f"| **{_us(row.revalidated.median_us)}** / {_us(row.revalidated.p95_us)} "
            f"| {_us(row.first_serve.median_us)} / {_us(row.first_serve.p95_us)} "
            f"| {_us(row.miss_through_cache.median_us)} / {_us(row.miss_through_cache.p95_us)} "
            f"| {full.sent:,} B / {full.received:,} B | {reval.sent:,} B / **{reval.received:,} B** "
            f"| {outcomes} (first serve: {first}) | {'yes' if row.same_answer else 'NO'} |"
        )
    out += [
        "",
        f"### Where a revalidated read's time goes, ms (each part timed alone, median of {READ_PARTS_RUNS})",
        "",
        "The steady-state read pays the conditional call, the decode and the rest; the output-schema check "
        "is paid once per stored answer per process (the first serve).",
        "",
        "| transport | server | revalidated read | conditional call + not-modified reply "
        "| decode the stored answer (`decode_result`) | rest (merge, store update, wrapper) "
        "| first serve | check against the output schema (alone) | first serve − revalidated read |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        p = row.parts
        if p is None:
            continue
        steady = row.revalidated.median_us
        rest = steady - p.conditional_us - p.decode_us
        first_serve = row.first_serve.median_us
        out.append(
            f"| {row.transport} | {row.server} | {steady / 1000:.1f} "
            f"| {p.conditional_us / 1000:.1f} | {p.decode_us / 1000:.1f} | {rest / 1000:.1f} "
            f"| {first_serve / 1000:.1f} | {p.validate_us / 1000:.1f} | {(first_serve - steady) / 1000:.1f} |"
        )
    return out


def render_memory(rows: list[dict[str, Any]]) -> list[str]:
    target_kib = (256 + 150) * 1024
    out = [
        "### Peak RSS while 2 GiB of results pass through a MemoryStore bounded at 256 MiB",
        "",
        f"| workload | {MMAP_ENV} | remedy tried | RSS after imports | **peak RSS** (ru_maxrss) | VmHWM "
        "| peak − after imports | against 406 MiB | RSS at end | store at end | results (largest) | fresh hits "
        "| wall time |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        peak = row["peak_rss_kib"]
        after = row["rss_after_imports_kib"]
        if row["mode"] == "bare":
            out.append(
                f"| bare interpreter | {row['mmap_threshold'] or 'unset'} | — | {_mib(after)} | {_mib(peak)} "
                f"| {_mib(row['vm_hwm_kib'])} | — | — | — | — | — | — | — |"
            )
            continue
        verdict = "under" if peak < target_kib else "**over**"
        out.append(
            f"| {row['mode']} | {row['mmap_threshold'] or 'unset'} | {row['variant']} | {_mib(after)} "
            f"| **{_mib(peak)}** | {_mib(row['vm_hwm_kib'])} | {_mib(peak - after)} | {verdict} "
            f"| {_mib(row['rss_end_kib'])} "
            f"| {row['store_bytes'] / MiB:.0f} MiB ({row['store_items']} items) "
            f"| {row['results']:,} ({row['largest'] / MiB:.1f} MiB) | {row['fresh_hits']} | {row['seconds']:.1f} s |"
        )
    return out


def _spread(s: Spread, fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(s.median)} [{fmt.format(s.p10)}–{fmt.format(s.p90)}; {fmt.format(s.low)}–{fmt.format(s.high)}]"


def _share(s: Spread) -> str:
    return f"**{s.median:.1%}** [{s.p10:.1%}–{s.p90:.1%}; {s.low:.1%}–{s.high:.1%}]"


def render_integrity(result: IntegrityResult) -> list[str]:
    name = {
        "memory": "MemoryStore",
        "sqlite": "SQLiteStore (temp file)",
        "redis": f"RedisStore (redis-server {result.redis_version}, loopback)",
    }
    reps = ", ".join(f"{' and '.join(block)}: {result.reps[block[0]]}" for block in INTEGRITY_BLOCKS)
    c = result.checksum_ms
    out = [
        f"### What checksums and compare-and-set cost: the {_kb(result.notebook_bytes)} notebook, "
        f"a stored answer of {_kb(result.stored_bytes)}",
        "",
        f"{result.rounds} rounds; each round times every store's blocks once, in a shuffled order; within a block "
        f"its configurations alternate call by call (calls per configuration and round: {reps}), and a round's "
        "value is the median of its calls. Cells: median over rounds [p10–p90; min–max of the per-round "
        "values]; ratios and differences are taken within each round, then summarised. "
        f"`body_checksum` (xxh3_64) of the stored answer alone: {_spread(c)} ms.",
        "",
        "#### Fresh hit: the checksum verified on load",
        "",
        "| store | `load_many([entry, mark])`, ms | checksum ÷ load | fresh hit through `ToolCache`, ms "
        "| checksum ÷ fresh hit | not fresh |",
        "|---|---|---|---|---|---|",
    ]
    for r in result.stores:
        out.append(
            f"| {name[r.store]} | {_spread(r.load_ms)} | {_share(r.checksum_of_load)} | {_spread(r.fresh_ms)} "
            f"| {_share(r.checksum_of_fresh)} | {r.not_fresh} |"
        )
    out += [
        "",
        "#### Revalidation: `update_meta` with compare-and-set (if_tag, stamp) against without",
        "",
        "| store | `update_meta(key, meta, expires_at)`, µs | `update_meta(..., if_tag=tag, stamp=now)`, µs "
        "| with ÷ without | with − without, µs | refused |",
        "|---|---|---|---|---|---|",
    ]
    for r in result.stores:
        us = "{:.1f}"
        plain = Spread(*(v * 1e3 for v in asdict(r.update_ms).values()))
        cas = Spread(*(v * 1e3 for v in asdict(r.update_cas_ms).values()))
        out.append(
            f"| {name[r.store]} | {_spread(plain, us)} | {_spread(cas, us)} "
            f"| **{_spread(r.cas_over_plain, '{:.3f}')}** | {_spread(r.cas_minus_plain_us, '{:+.1f}')} "
            f"| {r.refused} |"
        )
    out += [
        "",
        "#### Save: the checksum computed on save",
        "",
        "| store | `save()` of the stored answer, ms | checksum ÷ save |",
        "|---|---|---|",
    ]
    for r in result.stores:
        out.append(f"| {name[r.store]} | {_spread(r.save_ms)} | {_share(r.checksum_of_save)} |")
    return out


# --- 5. large answers: fresh hits against a full read, memory per revalidated read, SQLite at 20 MB --------


LARGE_ROUNDS = 10
LARGE_REPS = 3
"""Calls of each configuration per round (alternating, the order flipped every call); a round's value is the
median of its calls."""
LOAD_SIZES_MB = (1, 5, 10, 20)


@dataclass
class LargeResult:
    notebook_bytes: int
    stored_bytes: int
    big_stored_bytes: int
    rounds: int
    full_read_ms: Spread
    """`client.call_tool("read_notebook")` over streamable HTTP on 127.0.0.1: the whole answer, every time."""
    fresh_memory_ms: Spread
    fresh_sqlite_ms: Spread
    full_over_fresh_memory: Spread
    """Per round: full read ÷ fresh hit (MemoryStore)."""
    full_over_fresh_sqlite: Spread
    revalidated_peak_mib: dict[str, Spread]
    """tracemalloc peak above the start of one revalidated read (the stored answer already decoded once)."""
    big_fresh_memory_ms: Spread
    big_fresh_sqlite_ms: Spread
    big_sqlite_over_memory: Spread
    """Per round: fresh hit of the ~20 MB answer, SQLiteStore ÷ MemoryStore."""
    sqlite_load_ms: dict[str, Spread]
    """`SQLiteStore.load_many([key])` of a body of 1/5/10/20 MB (random bytes), per size."""


async def _alternating(arms: dict[str, Callable[[], Awaitable[object]]], reps: int) -> dict[str, float]:
    """One round: each arm called `reps` times, in turn, the order flipped every call; the median per arm."""
    names = list(arms)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        for name in names if rep % 2 == 0 else reversed(names):
            start = time.perf_counter()
            await arms[name]()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


async def _rounds(
    arms: dict[str, Callable[[], Awaitable[object]]], rounds: int, reps: int, label: str
) -> dict[str, list[float]]:
    for call in arms.values():
        await call()
    per_round: dict[str, list[float]] = {name: [] for name in arms}
    for index in range(rounds):
        print(f"{label}: round {index + 1} of {rounds}...", file=sys.stderr)
        gc.collect()
        with gc_paused():
            for name, value in (await _alternating(arms, reps)).items():
                per_round[name].append(value)
    return per_round


async def _revalidated_peaks(view: Any, clock: ShiftedClock, args: dict[str, Any], runs: int) -> list[float]:
    """tracemalloc's peak above the start of each revalidated read, in MiB."""
    import tracemalloc

    peaks = []
    clock.expire()
    await view.call("read_notebook", args)  # the first serve checks the answer once; not counted
    tracemalloc.start()
    try:
        for _ in range(runs):
            clock.expire()
            gc.collect()
            tracemalloc.reset_peak()
            start, _ = tracemalloc.get_traced_memory()
            call = await view.call("read_notebook", args)
            _, peak = tracemalloc.get_traced_memory()
            assert call.outcome.status == "revalidated", call.outcome
            del call
            peaks.append((peak - start) / MiB)
    finally:
        tracemalloc.stop()
    return peaks


async def _sqlite_loads(tmp: Path, rounds: int) -> dict[str, Spread]:
    store = SQLiteStore(tmp / "loads.db", StoreLimits(max_bytes=200 * MiB))
    try:
        arms: dict[str, Callable[[], Awaitable[object]]] = {}
        for mb in LOAD_SIZES_MB:
            key = f"load-{mb}"
            await store.save(key, Item({"n": mb}, os.urandom(mb * MB), "bench"))

            async def load(key: str = key) -> object:
                items = await store.load_many([key])
                assert items[0] is not None
                return items

            arms[f"{mb} MB"] = load
        per_round = await _rounds(arms, rounds, LARGE_REPS, "sqlite loads")
    finally:
        await store.close()
    return {name: Spread.of([v * 1e3 for v in values]) for name, values in per_round.items()}


async def large_rows(quick: bool, errlog: TextIO) -> LargeResult:
    rounds = 4 if quick else LARGE_ROUNDS
    with tempfile.TemporaryDirectory(prefix="mcpcache-bench-") as tmp_name:
        tmp = Path(tmp_name)
        name, big = "read-5mb.ipynb", "read-10mb.ipynb"
        notebook_bytes = generate_notebook_of_size(tmp / name, NOTEBOOK_BYTES, seed=5).stat().st_size
        generate_notebook_of_size(tmp / big, 2 * NOTEBOOK_BYTES, seed=6)
        stores: dict[str, Store] = {
            "memory": MemoryStore(StoreLimits(max_bytes=256 * MiB)),
            "sqlite": SQLiteStore(tmp / "large.db"),
        }
        try:
            async with demo_client("http", tmp, [], WireLog(deferred=True), errlog) as client:
                await client.list_tools()
                frozen = FrozenClock()
                views = {kind: ToolCache(store, clock=frozen).wrap(client) for kind, store in stores.items()}
                args, big_args = {"path": name}, {"path": big}
                sizes: dict[str, int] = {}
                for view in views.values():
                    for a in (args, big_args):
                        first = await view.call("read_notebook", a)
                        assert first.outcome.status == "miss", first.outcome
                        sizes[a["path"]] = len(encode_result(first.result))

                def fresh(view: Any, a: dict[str, Any]) -> Callable[[], Awaitable[object]]:
                    async def call() -> object:
                        got = await view.call("read_notebook", a)
                        assert got.outcome.status == "fresh_hit", got.outcome
                        return got

                    return call

                async def full() -> object:
                    return await client.call_tool("read_notebook", args)

                print("large: 5 MB notebook, full read against fresh hits...", file=sys.stderr)
                small = await _rounds(
                    {"full": full, "memory": fresh(views["memory"], args), "sqlite": fresh(views["sqlite"], args)},
                    rounds,
                    LARGE_REPS,
                    "large: 5 MB",
                )
                print("large: the 10 MB notebook's answer, fresh hits...", file=sys.stderr)
                large = await _rounds(
                    {"memory": fresh(views["memory"], big_args), "sqlite": fresh(views["sqlite"], big_args)},
                    rounds,
                    LARGE_REPS,
                    "large: 20 MB",
                )
                peaks: dict[str, Spread] = {}
                for kind, store in stores.items():
                    clock = ShiftedClock()
                    view = ToolCache(store, clock=clock, partition="revalidated").wrap(client)
                    await view.call("read_notebook", args)
                    peaks[kind] = Spread.of(await _revalidated_peaks(view, clock, args, 3 if quick else 8))
        finally:
            for store in stores.values():
                await store.close()
        loads = await _sqlite_loads(tmp, rounds)

    def ms(values: list[float]) -> Spread:
        return Spread.of([v * 1e3 for v in values])

    def ratio(top: list[float], bottom: list[float]) -> Spread:
        return Spread.of([a / b for a, b in zip(top, bottom, strict=True)])

    return LargeResult(
        notebook_bytes=notebook_bytes,
        stored_bytes=sizes[name],
        big_stored_bytes=sizes[big],
        rounds=rounds,
        full_read_ms=ms(small["full"]),
        fresh_memory_ms=ms(small["memory"]),
        fresh_sqlite_ms=ms(small["sqlite"]),
        full_over_fresh_memory=ratio(small["full"], small["memory"]),
        full_over_fresh_sqlite=ratio(small["full"], small["sqlite"]),
        revalidated_peak_mib=peaks,
        big_fresh_memory_ms=ms(large["memory"]),
        big_fresh_sqlite_ms=ms(large["sqlite"]),
        big_sqlite_over_memory=ratio(large["sqlite"], large["memory"]),
        sqlite_load_ms=loads,
    )


def render_large(result: LargeResult) -> list[str]:
    r = result
    return [
        f"### Large answers: a {_kb(r.notebook_bytes)} notebook (stored answer {_kb(r.stored_bytes)}), "
        f"and a {_kb(r.big_stored_bytes)} stored answer",
        "",
        f"Per-round medians over {r.rounds} rounds (median [p10-p90] (min-max)).",
        "",
        "| measure | value |",
        "|---|---|",
        f"| full read over HTTP, ms | {_spread(r.full_read_ms)} |",
        f"| fresh hit, MemoryStore, ms | {_spread(r.fresh_memory_ms)} |",
        f"| fresh hit, SQLiteStore, ms | {_spread(r.fresh_sqlite_ms)} |",
        f"| full read ÷ fresh hit, MemoryStore | {_spread(r.full_over_fresh_memory, '{:.1f}')} |",
        f"| full read ÷ fresh hit, SQLiteStore | {_spread(r.full_over_fresh_sqlite, '{:.1f}')} |",
        *(
            f"| client memory per revalidated read (tracemalloc peak), {kind}, MiB | {_spread(s)} |"
            for kind, s in r.revalidated_peak_mib.items()
        ),
        f"| {_kb(r.big_stored_bytes)} fresh hit, MemoryStore, ms | {_spread(r.big_fresh_memory_ms)} |",
        f"| {_kb(r.big_stored_bytes)} fresh hit, SQLiteStore, ms | {_spread(r.big_fresh_sqlite_ms)} |",
        f"| {_kb(r.big_stored_bytes)} fresh hit, SQLite ÷ Memory | {_spread(r.big_sqlite_over_memory)} |",
        *(f"| SQLiteStore load_many of {size}, ms | {_spread(s)} |" for size, s in r.sqlite_load_ms.items()),
    ]


async def run(only: str | None, quick: bool, profile: bool, errlog: TextIO) -> dict[str, Any]:
    info = {**machine(libraries=LIBRARIES), "mcpcache_source": mcpcache_source()}
    results: dict[str, Any] = {"machine": info}
    out = ["### Machine", ""] + [f"- {key}: {value}" for key, value in info.items()]
    if only in (None, "fresh"):
        fresh, breakdowns, profile_text = await fresh_rows(quick, profile)
        out += ["", *render_fresh(fresh, breakdowns)]
        if profile_text:
            out += ["", profile_text]
        results["fresh"] = [asdict(r) for r in fresh]
        results["breakdown"] = [
            asdict(b) | {"driver_rest_us": b.driver_rest_us, "wrapper_us": b.wrapper_us} for b in breakdowns
        ]
    if only in (None, "reads"):
        notebook_bytes, reads = await read_rows(quick, errlog)
        out += ["", *render_reads(notebook_bytes, reads)]
        results["notebook_bytes"] = notebook_bytes
        results["reads"] = [asdict(r) for r in reads]
    if only == "integrity":
        integrity = await integrity_rows(quick, errlog)
        out += ["", *render_integrity(integrity)]
        results["integrity"] = asdict(integrity)
    if only == "large":
        large = await large_rows(quick, errlog)
        out += ["", *render_large(large)]
        results["large"] = asdict(large)
    if only in (None, "memory"):
        memory = memory_rows(quick)
        out += ["", *render_memory(memory)]
        results["memory"] = memory
    print("\n".join(out))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a tenth of the runs (smoke test)")
    parser.add_argument(
        "--only",
        choices=("fresh", "reads", "memory", "integrity", "large"),
        help="run one part (integrity, large: only when asked for)",
    )
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the fresh-hit path")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args()
    # The demo servers log their start on stderr; that is not part of the report.
    with open(os.devnull, "w") as errlog:
        results = anyio.run(run, args.only, args.quick, args.profile, errlog)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
