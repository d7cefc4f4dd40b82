"""A gateway replica's peak memory while one large answer passes through it, per configuration.

`python -m mcpcache gateway` in front of `mcpcache demo-server --no-revalidation` (over streamable HTTP on
127.0.0.1) reading a generated notebook, `read_notebook` declared (public, fresh for a minute). A stock MCP
client in a process of its own reads a small notebook through it (the code paths of a read warmed up), then
the large one. The first read of the large one comes from upstream (and is stored, with a store); with a
store, a second fresh gateway over the same store then reads it from the store.

Configurations: no store, a SQLite file, a redis-server started here; each with its replies as server-sent
events (the default) and as one JSON body (`json_response = true`). Before the large read the process's peak
RSS is reset (`/proc/PID/clear_refs`, 5) and its RSS taken; after it, its peak (`VmHWM`) less that RSS is
the read's peak above idle, reported in MB and as a multiple of the answer's size (the result's JSON as the
caller receives it). Rounds run the configurations in turn.

Run:  python benchmarks/gateway_peak.py                      (50 MB notebook, 2 rounds: about 10 minutes)
      python benchmarks/gateway_peak.py --size 10MB --rounds 1 --configs none-sse,redis-json
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

CALLER = """
import asyncio, json, sys
import mcp
from mcp.client.streamable_http import streamable_http_client

async def main(url):
    transport = streamable_http_client(url, max_sse_event_size=1 << 30)
    async with mcp.Client(transport, mode="legacy") as client:
        for path in ("small.ipynb", "big.ipynb"):
            sys.stdin.readline()
            result = await client.call_tool("read_notebook", {"path": path})
            assert not result.is_error
            size = len(result.model_dump_json(by_alias=True, exclude_none=True))
            del result
            print(size, flush=True)

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
    lines = ["[gateway]", 'host = "127.0.0.1"', "port = PORT"]
    if reply == "json":
        lines.append("json_response = true")
    if store == "sqlite":
        lines += ["", "[store]", f'sqlite = "{sqlite}"']
    elif store == "redis":
        lines += ["", "[store]", f'redis = "{redis_url}"', f'namespace = "{namespace}"']
    lines += ["", "[upstreams.demo]", f'url = "{upstream}"', "", "[upstreams.demo.tools.read_notebook]"]
    lines += ["ttl_ms = 60000", 'scope = "public"', ""]
    return "\n".join(lines)


def one_read(config: str, folder: Path, name: str) -> tuple[int, int]:
    """A fresh gateway with `config`: the small notebook read, its peak reset, then the big one read.
    Returns the big answer's size and the process's peak above its RSS before that read."""
    port = free_port()
    path = folder / f"{name}.toml"
    path.write_text(config.replace("PORT", str(port)), encoding="utf-8")
    log = (folder / f"{name}.log").open("wb")
    gateway = subprocess.Popen(
        [sys.executable, "-m", "mcpcache", "gateway", "--config", str(path)], stdout=log, stderr=subprocess.STDOUT
    )
    caller = None
    try:
        wait_until_listening(gateway, port, 120, "mcpcache gateway")
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
        time.sleep(1.0)  # the gateway idle again
        reset_peak(gateway.pid)
        idle = status(gateway.pid)["VmRSS"]
        caller.stdin.write("\n")
        caller.stdin.flush()
        answer = int(caller.stdout.readline())
        return answer, status(gateway.pid)["VmHWM"] - idle
    finally:
        if caller is not None:
            stop_process(caller)
        stop_process(gateway)
        log.close()


def one_configuration(store: str, reply: str, upstream: str, folder: Path, redis_url: str) -> dict[str, float]:
    """The first read in a fresh replica (from upstream, stored); with a store, the second in another fresh
    replica over the same store (from the store)."""
    tag = f"{store}-{reply}-{time.monotonic_ns()}"
    config = config_text(store, reply, upstream, folder / f"{tag}.db", redis_url, tag)
    found: dict[str, float] = {}
    for read in ("first", "second") if store != "none" else ("first",):
        answer, peak = one_read(config, folder, f"{tag}-{read}")
        found["answer_mb"] = answer / MB
        found[f"{read}_mb"] = peak / MB
        found[f"{read}_x"] = peak / answer
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="50MB")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--configs", default=",".join(f"{s}-{r}" for s in STORES for r in REPLIES))
    args = parser.parse_args()
    configs = [tuple(name.split("-")) for name in args.configs.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="mcpcache-gateway-peak-"))
    notebooks = folder / "notebooks"
    notebooks.mkdir()
    generate_notebook_of_size(notebooks / "big.ipynb", parse_size(args.size))
    generate_notebook_of_size(notebooks / "small.ipynb", 20_000)
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    results: dict[str, list[dict[str, float]]] = {f"{s}-{r}": [] for s, r in configs}
    try:
        with (
            RedisServer(binary, extra=("--dir", str(folder))) as redis_server,
            demo_servers(notebooks, {"up": ("--no-revalidation",)}) as ports,
        ):
            upstream = f"http://127.0.0.1:{ports['up']}/mcp"
            for round_ in range(args.rounds):
                for store, reply in configs:
                    found = one_configuration(store, reply, upstream, folder, redis_server.url)
                    results[f"{store}-{reply}"].append(found)
                    shown = json.dumps({k: round(v, 2) for k, v in found.items()})
                    print(f"round {round_ + 1} {store}-{reply}: {shown}")
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
            mbs = [r[f"{read}_mb"] for r in runs]
            xs = [r[f"{read}_x"] for r in runs]
            cells.append(f"{statistics.median(mbs):.0f} MB, {statistics.median(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})")
        print(f"| {name} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
