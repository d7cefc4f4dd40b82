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
(mcpcache.wire_count: JSON-RPC message bytes, HTTP framing not counted); time is the client's wall time
per read. Ratios ("vs direct") are taken per round against the stock client direct, then summarised (median, and the
25th-75th percentile spread). The redis-server and the three HTTP servers are started here on free
loopback ports and stopped by PID.

Run:  python benchmarks/gateway.py                 (5 MB notebook, 12 rounds: about two minutes)
      python benchmarks/gateway.py --size 1MB --rounds 4   (a smoke run)

`--scale` asks another question: what one fresh hit of a small answer costs a replica, and how replicas
scale. A bare FastMCP server with one tool answering a constant 1 KB (the per-request floor of FastMCP, the
MCP SDK and uvicorn, served as the gateway serves) and `mcpcache gateway` replicas sharing one real
redis-server (ttl 10 minutes, so every measured call is a fresh hit) are each called by 1, 8 and 32
concurrent callers, against 1 and 2 processes, in both protocol eras (2026-07-28: one POST per call;
2025-11-25: a session), each with event-stream replies (the default) and with JSON replies
(`json_response`). The callers speak streamable HTTP by hand over keep-alive connections, so the load
generator's own CPU stays small. Configurations are interleaved in rounds; each round makes `--calls`
calls in each. Per configuration: calls/s, p50 and p99 latency over every call, and the CPU of the
measured processes per call (user plus system, from /proc/PID/stat), with the redis-server's and the
upstream's; "over the floor" is the gateway's CPU per call less the bare server's in the same round.

`--inproc` looks inside one process: the CPU each fresh hit spends in the gateway's FastMCP middleware
chain (no HTTP, no session, no serialisation), against the bare tool's run there, with the replica's front
tier and with it turned off (every hit asks Redis), interleaved.

Run:  python benchmarks/gateway.py --scale                           (5 rounds of 400 calls: about 6 minutes)
      python benchmarks/gateway.py --inproc                          (10 rounds of 400 calls: about a minute)
      python benchmarks/gateway.py --scale --kinds floor,gateway --clients 8 --rounds 2   (a smoke run)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
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
from mcpcache.bench.wire import CountingFastMCPTransport
from mcpcache.client import ToolCache
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.gateway.app import KEEP_ALIVE_S
from mcpcache.processes import RedisServer, free_port, stop_process, wait_until_listening
from mcpcache.stores import MemoryStore
from mcpcache.wire_count import WireLog

NOTEBOOK = "bench.ipynb"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
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


# --- scale: fresh hits of a 1 KB answer from 1, 8 and 32 concurrent callers --------------------------------

FLOOR_TOOL = "read"
FLOOR_TEXT = "mcpcache " * 111  # with the JSON around it, about 1 KB of structured content
SCALE_TTL_MS = 600_000
ERAS = ("modern", "legacy")
MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"


def serve_floor(port: int, json_response: bool, http: str = "auto") -> None:
    """A bare FastMCP server with one tool returning a constant 1 KB answer, served as the gateway serves
    (FastMCP's streamable HTTP app under uvicorn, the gateway's keep-alive): the per-request floor."""
    server = fastmcp.FastMCP("floor")

    @server.tool(name=FLOOR_TOOL)
    def read(key: str) -> dict[str, Any]:
        return {"kind": "doc", "key": key, "text": FLOOR_TEXT}

    server.run(
        transport="http",
        host="127.0.0.1",
        port=port,
        show_banner=False,
        uvicorn_config={"timeout_keep_alive": KEEP_ALIVE_S, "http": http},
        json_response=True if json_response else None,
    )


KINDS = ("floor", "floor-json", "gateway", "gateway-json")
"""What is measured: the bare server and the gateway, each answering with event streams (the default) and
with JSON bodies (`[gateway] json_response = true`), with uvicorn's HTTP parser as installed (httptools)."""

H11_KINDS = tuple(f"{kind}-h11" for kind in KINDS)
"""The same with the pure-Python parser (`[gateway] http = "h11"`), on request (`--kinds`)."""


def gateway_config(folder: Path, upstream: str, redis_url: str, *, json_response: bool, http: str = "auto") -> Path:
    path = folder / f"gateway{'-json' if json_response else ''}-{http}.toml"
    path.write_text(
        f"""[gateway]
json_response = {str(json_response).lower()}
http = "{http}"

[store]
redis = "{redis_url}"

[upstreams.up]
url = "{upstream}"

[upstreams.up.tools.{FLOOR_TOOL}]
ttl_ms = {SCALE_TTL_MS}
scope = "public"
""",
        encoding="utf-8",
    )
    return path


class RawSession:
    """One caller: a keep-alive HTTP/1.1 connection speaking MCP's streamable HTTP by hand, so that the load
    generator spends as little CPU per call as it can (a full SDK client costs more than a fresh hit)."""

    def __init__(self, port: int, era: str) -> None:
        self.port = port
        self.era = era
        self.session_id: str | None = None
        self.next_id = 0
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        if self.era == "legacy":
            params = {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            }
            status, headers, _ = await self._post(self._request("initialize", params), {})
            assert status == 200, status
            self.session_id = headers["mcp-session-id"]
            status, _, _ = await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"}, {})
            assert status == 202, status

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()

    def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        return {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}

    async def call(self) -> None:
        """One tools/call; raises unless it brought back the tool's answer."""
        params: dict[str, Any] = {"name": FLOOR_TOOL, "arguments": {"key": "k"}}
        headers = {}
        if self.era == "modern":
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
            }
            headers = {"mcp-method": "tools/call", "mcp-name": FLOOR_TOOL}
        status, _, body = await self._post(self._request("tools/call", params), headers)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {body[:200]!r}")
        start = body.find(b"{")
        message = json.loads(body[start : body.rindex(b"}") + 1])
        result = message.get("result")
        if not isinstance(result, dict) or result.get("isError") or "structuredContent" not in result:
            raise RuntimeError(f"not the tool's answer: {body[:300]!r}")

    async def _post(self, message: dict[str, Any], extra: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        assert self.reader is not None
        assert self.writer is not None
        payload = json.dumps(message, separators=(",", ":")).encode()
        lines = [
            "POST /mcp HTTP/1.1",
            f"host: 127.0.0.1:{self.port}",
            "accept: application/json, text/event-stream",
            "content-type: application/json",
            f"content-length: {len(payload)}",
            f"mcp-protocol-version: {MODERN_VERSION if self.era == 'modern' else LEGACY_VERSION}",
        ]
        if self.session_id is not None:
            lines.append(f"mcp-session-id: {self.session_id}")
        lines += [f"{name}: {value}" for name, value in extra.items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            body = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding") == "chunked":
            chunks = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n"))[:-2], 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                chunks.append(chunk[:-2])
            body = b"".join(chunks)
        else:
            body = b""
        return int(status_line.split()[1]), headers, body


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of a process, its threads (ended ones too) included."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclass
class ScaleConfig:
    kind: str  # "floor": the bare FastMCP server; "gateway": fresh hits through mcpcache gateway replicas
    replicas: int
    clients: int
    era: str
    calls_per_s: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    redis_cpu_ms: list[float] = field(default_factory=list)
    upstream_cpu_ms: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.kind}, {self.replicas} x, {self.clients} clients, {self.era}"


async def drive(sessions: list[RawSession], calls: int, latencies: list[float]) -> float:
    """`calls` calls spread over `sessions`, each session one caller calling back to back; wall seconds."""
    left = calls

    async def caller(session: RawSession) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            began = time.perf_counter()
            await session.call()
            latencies.append(time.perf_counter() - began)

    began = time.perf_counter()
    await asyncio.gather(*(caller(session) for session in sessions))
    return time.perf_counter() - began


def _quiet_process(command: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def run_scale(args: argparse.Namespace) -> dict[str, Any]:
    redis_binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    started: list[subprocess.Popen[bytes]] = []

    def launch(command: list[str], port: int, what: str) -> subprocess.Popen[bytes]:
        process = _quiet_process(command)
        started.append(process)
        wait_until_listening(process, port, 60, what)
        return process

    sessions: list[RawSession] = []
    folder = Path(tempfile.mkdtemp(prefix="mcpcache-gateway-scale-"))
    try:
        with RedisServer(redis_binary) as redis:
            assert redis.process is not None

            def floor(json_response: bool, http: str = "auto") -> tuple[subprocess.Popen[bytes], int]:
                port = free_port()
                command = [sys.executable, __file__, "--serve-floor", str(port), "--floor-http", http]
                command += ["--floor-json"] if json_response else []
                return launch(command, port, "floor server"), port

            upstream_process, upstream_port = floor(False)
            upstream = f"http://127.0.0.1:{upstream_port}/mcp"
            servers: dict[str, list[tuple[subprocess.Popen[bytes], int]]] = {}
            for kind in args.kinds:
                json_response = "-json" in kind
                http = "h11" if kind.endswith("-h11") else "auto"
                servers[kind] = []
                for _ in range(max(args.replicas)):
                    if kind.startswith("floor"):
                        servers[kind].append(floor(json_response, http))
                        continue
                    port = free_port()
                    config = gateway_config(folder, upstream, redis.url, json_response=json_response, http=http)
                    command = [sys.executable, "-m", "mcpcache", "gateway", "--config", str(config)]
                    servers[kind].append((launch([*command, "--port", str(port)], port, "mcpcache gateway"), port))
            most = max(args.clients)
            pools: dict[tuple[str, str, int], list[RawSession]] = {}
            for kind, processes in servers.items():
                for era in ERAS:
                    for index, (_, port) in enumerate(processes):
                        pool = [RawSession(port, era) for _ in range(-(-most // (index + 1)))]
                        for session in pool:
                            await session.open()
                            await session.call()  # warm: the gateway's first call fills the store
                        pools[(kind, era, index)] = pool
                        sessions += pool
            configs = [
                ScaleConfig(kind, replicas, clients, era)
                for kind in args.kinds
                for replicas in args.replicas
                for clients in args.clients
                for era in ERAS
            ]
            redis_pid, upstream_pid = redis.process.pid, upstream_process.pid
            for round_index in range(args.rounds):
                order = configs[:]
                random.Random(round_index).shuffle(order)
                for config in order:
                    # Caller i talks to replica i mod replicas (a session stays with its replica).
                    chosen = [
                        pools[(config.kind, config.era, i % config.replicas)][i // config.replicas]
                        for i in range(config.clients)
                    ]
                    pids = [process.pid for process, _ in servers[config.kind][: config.replicas]]
                    before = [cpu_seconds(pid) for pid in (*pids, redis_pid, upstream_pid)]
                    wall = await drive(chosen, args.calls, config.latencies)
                    after = [cpu_seconds(pid) for pid in (*pids, redis_pid, upstream_pid)]
                    spent = [b - a for a, b in zip(before, after, strict=True)]
                    config.calls_per_s.append(args.calls / wall)
                    config.cpu_ms.append(sum(spent[: len(pids)]) / args.calls * 1000)
                    config.redis_cpu_ms.append(spent[-2] / args.calls * 1000)
                    config.upstream_cpu_ms.append(spent[-1] / args.calls * 1000)
                print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        for session in sessions:
            await session.close()
        for process in started:
            stop_process(process)
        shutil.rmtree(folder, ignore_errors=True)
    return scale_report(configs, args)


def _mid(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "p10": percentile(values, 0.1), "p90": percentile(values, 0.9)}


def scale_report(configs: list[ScaleConfig], args: argparse.Namespace) -> dict[str, Any]:
    floor = {(c.kind, c.replicas, c.clients, c.era): c for c in configs if c.kind.startswith("floor")}
    rows = []
    for config in configs:
        row: dict[str, Any] = {
            "kind": config.kind,
            "replicas": config.replicas,
            "clients": config.clients,
            "era": config.era,
            "calls_per_s": _mid(config.calls_per_s),
            "p50_ms": percentile(config.latencies, 0.5) * 1000,
            "p99_ms": percentile(config.latencies, 0.99) * 1000,
            "cpu_ms_per_call": _mid(config.cpu_ms),
            "redis_cpu_ms_per_call": statistics.median(config.redis_cpu_ms),
            "upstream_cpu_ms_per_call": statistics.median(config.upstream_cpu_ms),
        }
        base = floor.get((config.kind.replace("gateway", "floor"), config.replicas, config.clients, config.era))
        if config.kind.startswith("gateway") and base is not None:
            row["over_floor_ms"] = _mid([a - b for a, b in zip(config.cpu_ms, base.cpu_ms, strict=True)])
        rows.append(row)
    return {"calls": args.calls, "rounds": args.rounds, "machine": machine(), "rows": rows}


def print_scale(document: dict[str, Any]) -> None:
    print(
        f"fresh hits of a 1 KB answer over streamable HTTP on 127.0.0.1: {document['calls']} calls per "
        f"configuration per round, {document['rounds']} rounds, interleaved; CPU: median (p10-p90) over rounds\n"
    )
    print(
        "| server | replicas | clients | era | calls/s | p50 ms | p99 ms | server CPU ms/call | over the floor "
        "| redis ms/call | upstream ms/call |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---|---|---:|---:|")
    for row in document["rows"]:
        cpu, over = row["cpu_ms_per_call"], row.get("over_floor_ms")
        over_text = f"{over['median']:.2f} ({over['p10']:.2f}-{over['p90']:.2f})" if over else "-"
        print(
            f"| {row['kind']} | {row['replicas']} | {row['clients']} | {row['era']} "
            f"| {row['calls_per_s']['median']:.0f} "
            f"| {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {cpu['median']:.2f} ({cpu['p10']:.2f}-{cpu['p90']:.2f}) "
            f"| {over_text} | {row['redis_cpu_ms_per_call']:.2f} | {row['upstream_cpu_ms_per_call']:.2f} |"
        )
    print(f"\n{document['machine']['cpu']}, {document['machine']['cores']} cores; {document['machine']['libraries']}")


# --- in process: the CPU of a fresh hit inside the gateway's FastMCP middleware --------------------------


class _CpuMeter(fastmcp.server.middleware.Middleware):
    """The outermost middleware: the process CPU each tools/call spends inside the chain."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    async def on_call_tool(self, context: Any, call_next: Any) -> Any:
        began = time.process_time()
        try:
            return await call_next(context)
        finally:
            self.samples.append(time.process_time() - began)


async def run_inproc(args: argparse.Namespace) -> dict[str, Any]:
    """The middleware chain's CPU per call, in this process (no HTTP, no session, no serialisation): the bare
    tool's run against a gateway fresh hit from Redis, with the replica's front tier and without it."""
    from mcpcache.gateway.app import build_gateway, open_store
    from mcpcache.gateway.config import quick_config, with_overrides
    from mcpcache.gateway.middleware import GatewayMiddleware

    redis_binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    port = free_port()
    upstream_process = _quiet_process([sys.executable, __file__, "--serve-floor", str(port)])
    servers: dict[str, fastmcp.FastMCP[Any]] = {}
    try:
        wait_until_listening(upstream_process, port, 60, "floor server")
        with RedisServer(redis_binary) as redis:
            floor = fastmcp.FastMCP("floor")

            @floor.tool(name=FLOOR_TOOL)
            def read(key: str) -> dict[str, Any]:
                return {"kind": "doc", "key": key, "text": FLOOR_TEXT}

            servers["bare tool"] = floor
            for name in ("gateway, front tier", "gateway, every hit asks Redis"):
                config = quick_config(
                    url=f"http://127.0.0.1:{port}/mcp", command=None, tools=[f"{FLOOR_TOOL}={SCALE_TTL_MS}:public"]
                )
                config = with_overrides(config, redis=redis.url)
                assert config.store is not None
                server = build_gateway(config, store=open_store(config.store)).server
                if "every hit" in name:
                    for middleware in server.middleware:
                        if isinstance(middleware, GatewayMiddleware) and middleware.caches is not None:
                            middleware.caches.front = None
                servers[name] = server
            meters = {name: _CpuMeter() for name in servers}
            for name, server in servers.items():
                server.middleware.insert(0, meters[name])
            per_round: dict[str, list[float]] = {name: [] for name in servers}
            async with AsyncExitStack() as stack:
                clients = {name: await stack.enter_async_context(fastmcp.Client(s)) for name, s in servers.items()}
                for client in clients.values():
                    for _ in range(3):
                        await client.call_tool(FLOOR_TOOL, {"key": "k"})
                for _ in range(args.rounds):
                    for name, client in clients.items():
                        meters[name].samples.clear()
                        for _ in range(args.calls):
                            await client.call_tool(FLOOR_TOOL, {"key": "k"})
                        per_round[name].append(statistics.median(meters[name].samples) * 1e6)
    finally:
        stop_process(upstream_process)
    rows = [{"config": name, "us_per_call": _mid(values)} for name, values in per_round.items()]
    return {"calls": args.calls, "rounds": args.rounds, "machine": machine(), "rows": rows}


def print_inproc(document: dict[str, Any]) -> None:
    print(
        f"CPU per tools/call inside the FastMCP middleware chain, in process: median of {document['calls']} calls "
        f"per round, {document['rounds']} rounds; median (p10-p90) over rounds\n"
    )
    print("| configuration | µs per call |")
    print("|---|---|")
    for row in document["rows"]:
        cpu = row["us_per_call"]
        print(f"| {row['config']} | {cpu['median']:.0f} ({cpu['p10']:.0f}-{cpu['p90']:.0f}) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="5MB", help="notebook size on disk (default 5MB)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--scale", action="store_true", help="fresh hits of a 1 KB answer at 1, 8, 32 callers instead")
    parser.add_argument("--inproc", action="store_true", help="the middleware chain's CPU per fresh hit, in process")
    parser.add_argument("--calls", type=int, default=400, help="--scale: calls per configuration per round")
    parser.add_argument("--clients", default="1,8,32", help="--scale: concurrent callers, comma-separated")
    parser.add_argument("--replicas", default="1,2", help="--scale: gateway replicas, comma-separated (1 or 2)")
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help=f"--scale: what to measure, of {','.join(KINDS + H11_KINDS)}"
    )
    parser.add_argument("--serve-floor", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--floor-json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--floor-http", default="auto", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_floor is not None:
        serve_floor(args.serve_floor, args.floor_json, args.floor_http)
        return
    if args.inproc:
        if "--rounds" not in sys.argv:
            args.rounds = 10
        inproc = asyncio.run(run_inproc(args))
        print_inproc(inproc)
        if args.json is not None:
            args.json.write_text(json.dumps(inproc, indent=2), encoding="utf-8")
        return
    if args.scale:
        args.clients = [int(n) for n in args.clients.split(",")]
        args.replicas = [int(n) for n in args.replicas.split(",")]
        args.kinds = [kind for kind in KINDS + H11_KINDS if kind in args.kinds.split(",")]
        if "--rounds" not in sys.argv:
            args.rounds = 5
        scale = asyncio.run(run_scale(args))
        print_scale(scale)
        if args.json is not None:
            args.json.write_text(json.dumps(scale, indent=2), encoding="utf-8")
        return
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
