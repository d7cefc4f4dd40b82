"""A gateway replica's peak memory while one large answer passes through it, per configuration.

`python -m mcpcache gateway` in front of `mcpcache demo-server --no-revalidation` (over streamable HTTP on
127.0.0.1) reading a generated notebook, `read_notebook` declared (public, fresh for a minute). A stock MCP
client in a process of its own reads a small notebook through it (the code paths of a read warmed up), then
the large one. The first read of the large one comes from upstream (and is stored, with a store); with a
store, a second fresh gateway over the same store then reads it from the store.

Configurations: no store, a SQLite file, a redis-server started here; each with its replies as server-sent
events (the default) and as one JSON body (`json_response = true`); and two controls without mcpcache: the
stock client reading from the upstream itself (`sdk-client`, its own peak) and FastMCP's own proxy in place
of the gateway (`fastmcp-proxy`). Before the large read the measured process's peak RSS is reset
(`/proc/PID/clear_refs`, 5) and its RSS taken; after it, its peak (`VmHWM`) less that RSS is the read's peak
above idle, reported in MB and as a multiple of the answer's size (the result's JSON as the caller receives
it). Rounds run the configurations in turn. A second read whose store operation failed (a load past its
deadline on a loaded machine, which then went upstream) is left out of the table and counted.

`--parse` runs the MCP SDK client's receiving steps one by one on the answer's event instead (where the first
read's peak comes from).

Run:  python benchmarks/gateway_peak.py                      (50 MB notebook, 2 rounds: about 25 minutes)
      python benchmarks/gateway_peak.py --size 10MB --rounds 1 --configs none-sse,redis-json,sdk-client
      python benchmarks/gateway_peak.py --parse
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcpcache.bench.common import machine
from mcpcache.bench.hops import demo_servers
from mcpcache.bench.runner import parse_size
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.processes import RedisServer, free_port, stop_process, wait_until_listening

MB = 1_000_000
STORES = ("none", "sqlite", "redis")
REPLIES = ("sse", "json")
CONTROLS = ("sdk-client", "fastmcp-proxy")
"""Without mcpcache: a stock MCP client reading from the upstream itself, and FastMCP's own proxy."""

CALLER = """
import asyncio, json, sys
import mcp
from mcp.client.streamable_http import streamable_http_client

def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

async def main(url):
    transport = streamable_http_client(url, max_sse_event_size=1 << 30)
    async with mcp.Client(transport, mode="legacy") as client:
        for path in ("small.ipynb", "big.ipynb"):
            sys.stdin.readline()
            result = await client.call_tool("read_notebook", {"path": path})
            mine = peak()  # before the size is taken, which costs a copy of the answer
            assert not result.is_error, str(result.content)[:500]
            size = len(result.model_dump_json(by_alias=True, exclude_none=True))
            del result
            print(size, mine, flush=True)

asyncio.run(main(sys.argv[1]))
"""
"""Reads the small notebook (the code paths of a read warmed up), then, when told, the big one."""


def status(pid: int) -> dict[str, int]:
    """The process's memory lines of /proc/PID/status, in bytes."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) * 1024
    return found


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def config_text(store: str, reply: str, upstream: str, sqlite: Path, redis_url: str, namespace: str) -> str:
    lines = ["[gateway]", 'host = "127.0.0.1"']
    if reply == "json":
        lines.append("json_response = true")
    if store == "sqlite":
        lines += ["", "[store]", f'sqlite = "{sqlite}"']
    elif store == "redis":
        lines += ["", "[store]", f'redis = "{redis_url}"', f'namespace = "{namespace}"']
    lines += ["", "[upstreams.demo]", f'url = "{upstream}"', "", "[upstreams.demo.tools.read_notebook]"]
    lines += ["ttl_ms = 60000", 'scope = "public"', ""]
    return "\n".join(lines)


PROXY = """
import sys
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.server import create_proxy

upstream = StreamableHttpTransport(sys.argv[1], max_sse_event_size=None)  # as the gateway's
create_proxy(upstream).run(transport="http", host="127.0.0.1", port=int(sys.argv[2]), show_banner=False)
"""
"""The control: FastMCP's own proxy of the upstream, no mcpcache code in the process."""


def one_read(server: list[str] | None, port: int, folder: Path, name: str) -> tuple[int, int, bool]:
    """The small notebook read through `server` (a command listening on `port`), its peak reset, then the
    big one. Returns the big answer's size and the server's peak above its RSS before that read. With no
    server, the caller reads from the upstream on `port` directly and its own peak is returned. Last: whether
    the server logged a store operation that failed (a load past its deadline on a loaded machine: that read
    went upstream)."""
    log = (folder / f"{name}.log").open("wb")
    process = subprocess.Popen(server, stdout=log, stderr=subprocess.STDOUT) if server else None
    caller = None
    try:
        if process is not None:
            wait_until_listening(process, port, 120, " ".join(server or [])[:60])
        caller = subprocess.Popen(
            [sys.executable, "-c", CALLER, f"http://127.0.0.1:{port}/mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert caller.stdin is not None
        assert caller.stdout is not None
        caller.stdin.write("\n")
        caller.stdin.flush()
        caller.stdout.readline()
        time.sleep(1.0)  # the server idle again
        measured = process.pid if process is not None else caller.pid
        reset_peak(measured)
        idle = status(measured)["VmRSS"]
        caller.stdin.write("\n")
        caller.stdin.flush()
        answer, callers_peak = (int(word) for word in caller.stdout.readline().split())
        peak = status(measured)["VmHWM"] if process is not None else callers_peak
    finally:
        if caller is not None:
            stop_process(caller)
        if process is not None:
            stop_process(process)
        log.close()
    said = (folder / f"{name}.log").read_text(encoding="utf-8", errors="replace")
    failed = "failed" in said or "unreachable" in said  # a store operation's line, or the store outage's
    return answer, peak - idle, failed


def one_configuration(name: str, upstream: int, folder: Path, redis_url: str) -> dict[str, float]:
    """The first read in a fresh replica (from upstream, stored); with a store, the second in another fresh
    replica over the same store (from the store). The controls: `sdk-client`, the caller reading from the
    upstream itself (its own peak); `fastmcp-proxy`, FastMCP's proxy in place of the gateway."""
    tag = f"{name}-{time.monotonic_ns()}"
    found: dict[str, float] = {}
    reads: tuple[str, ...] = ("first",)
    if name == "sdk-client":
        command = None
    elif name == "fastmcp-proxy":
        command = [sys.executable, "-c", PROXY, f"http://127.0.0.1:{upstream}/mcp", "PORT"]
    else:
        store, reply = name.split("-")
        path = folder / f"{tag}.toml"
        config = config_text(store, reply, f"http://127.0.0.1:{upstream}/mcp", folder / f"{tag}.db", redis_url, tag)
        path.write_text(config, encoding="utf-8")
        command = [sys.executable, "-m", "mcpcache", "gateway", "--config", str(path), "--port", "PORT"]
        reads = ("first", "second") if store != "none" else ("first",)
    for read in reads:
        port = free_port() if command else upstream
        server = [part.replace("PORT", str(port)) for part in command] if command else None
        answer, peak, failed = one_read(server, port, folder, f"{tag}-{read}")
        if failed:
            found[f"{read}_store_failed"] = 1.0
        found["answer_mb"] = answer / MB
        found[f"{read}_mb"] = peak / MB
        found[f"{read}_x"] = peak / answer
    return found


PARSE = """
import ctypes, sys
from pathlib import Path
from httpx2._sse import _SSEParser
from mcp_types import CallToolResult
from mcp_types.jsonrpc import jsonrpc_message_adapter

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

trim = ctypes.CDLL("libc.so.6").malloc_trim

def step(name, base):
    peak = status("VmHWM") - base
    trim(0)  # what is freed goes back: what is left is what the step holds
    print(name, peak, status("VmRSS") - base, flush=True)
    Path("/proc/self/clear_refs").write_text("5")

base = status("VmRSS")
body = Path(sys.argv[1]).read_text(encoding="utf-8")
chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)][::-1]
del body
Path("/proc/self/clear_refs").write_text("5")
step("the event's text as it arrives (64 KiB chunks)", base)
decoder = _SSEParser(max_event_size=None)  # httpx2.EventSource's, no limit (as the gateway's)
events = []
while chunks:
    events.extend(decoder.decode(chunks.pop()))
events.extend(decoder.flush())
(sse,) = events
del events
step("httpx2's SSE decoder: the event (sse.data)", base)
message = jsonrpc_message_adapter.validate_json(sse.data, by_name=False)
step("the SDK's parse: the JSON-RPC message, next to sse.data", base)
logged = f"SSE message: {message}"  # mcp/client/streamable_http.py, evaluated with debug logging off
del logged
step("the SDK's debug line formatted and dropped", base)
del sse
step("the event dropped (the message handed on)", base)
result = CallToolResult.model_validate(message.result)
del message
step("the session's CallToolResult", base)
"""
"""Where the MCP SDK's client holds memory while it receives one large answer over SSE: the steps of
`mcp/client/streamable_http.py` run one by one on the answer's event, each step's peak and what is left
(above the process before the event's text, freed memory returned to the system after each step), in a
process of its own (glibc)."""


def parse_breakdown(upstream: int, folder: Path) -> None:
    """The big answer's SSE event as the upstream sends it, fed through the SDK client's steps."""
    import anyio
    import mcp
    from mcp.client.streamable_http import streamable_http_client
    from mcp_types import JSONRPCResponse

    async def fetch() -> str:
        transport = streamable_http_client(f"http://127.0.0.1:{upstream}/mcp", max_sse_event_size=None)
        async with mcp.Client(transport, mode="legacy") as client:
            result = await client.call_tool("read_notebook", {"path": "big.ipynb"})
        response = JSONRPCResponse(jsonrpc="2.0", id=2, result=result.model_dump(by_alias=True, exclude_none=True))
        return "event: message\ndata: " + response.model_dump_json(by_alias=True, exclude_unset=True) + "\n\n"

    event = anyio.run(fetch)
    path = folder / "event.txt"
    path.write_text(event, encoding="utf-8")
    size = len(event.encode("utf-8"))
    del event
    out = subprocess.run([sys.executable, "-c", PARSE, str(path)], capture_output=True, text=True, check=True)
    print(f"\nthe MCP SDK client's steps on one {size / MB:.1f} MB event (peak during / held after, above idle):")
    print("| step | peak | held after |\n|---|---:|---:|")
    for line in out.stdout.splitlines():
        name, peak, held = line.rsplit(" ", 2)
        print(f"| {name} | {int(peak) / MB:.0f} MB, {int(peak) / size:.2f}x | {int(held) / MB:.0f} MB |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="50MB")
    parser.add_argument("--rounds", type=int, default=2)
    every = [f"{s}-{r}" for s in STORES for r in REPLIES] + list(CONTROLS)
    parser.add_argument("--configs", default=",".join(every))
    parser.add_argument("--parse", action="store_true", help="the SDK client's steps on the answer, then exit")
    args = parser.parse_args()
    configs = args.configs.split(",")
    folder = Path(tempfile.mkdtemp(prefix="mcpcache-gateway-peak-"))
    notebooks = folder / "notebooks"
    notebooks.mkdir()
    generate_notebook_of_size(notebooks / "big.ipynb", parse_size(args.size))
    generate_notebook_of_size(notebooks / "small.ipynb", 20_000)
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    results: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    try:
        with (
            RedisServer(binary, extra=("--dir", str(folder))) as redis_server,
            demo_servers(notebooks, {"up": ("--no-revalidation",)}) as ports,
        ):
            if args.parse:
                parse_breakdown(ports["up"], folder)
                return
            for round_ in range(args.rounds):
                for name in configs:
                    found = one_configuration(name, ports["up"], folder, redis_server.url)
                    results[name].append(found)
                    shown = json.dumps({k: round(v, 2) for k, v in found.items()})
                    print(f"round {round_ + 1} {name}: {shown}")
                    print(f"  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\n{machine()}\nanswer: {statistics.median(r['answer_mb'] for v in results.values() for r in v):.1f} MB")
    print("| configuration | first read (from upstream) | second read (from the store) |")
    print("|---|---:|---:|")
    for name, runs in results.items():
        cells = []
        for read in ("first", "second"):
            if f"{read}_mb" not in runs[0]:
                cells.append("(no store)")
                continue
            kept = [r for r in runs if f"{read}_store_failed" not in r]  # a read the store failed went upstream
            if not kept:
                cells.append(f"(the store failed in all {len(runs)})")
                continue
            mbs = [r[f"{read}_mb"] for r in kept]
            xs = [r[f"{read}_x"] for r in kept]
            cell = f"{statistics.median(mbs):.0f} MB, {statistics.median(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})"
            cells.append(cell + (f", {len(runs) - len(kept)} of {len(runs)} left out" if len(kept) < len(runs) else ""))
        print(f"| {name} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
