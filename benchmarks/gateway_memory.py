"""Where a gateway replica's memory goes while it fetches one large answer: tracemalloc inside the replica.

benchmarks/large_answers.py measures the gateway process from outside (its peak RSS over idle against the
answer's size). This script runs the same gateway (`assemble_gateway` from a `[store]` configuration on a
real redis-server, in front of `mcpcache demo-server --no-revalidation` reading a generated notebook) inside
this process, served by uvicorn in a thread, with tracemalloc on. The caller is a stock MCP client in a
subprocess, so its own copies are not counted. A sampler thread takes a snapshot whenever the traced
memory reaches a new high (by 5 %), so the last snapshot is the peak within that margin; its blocks are
attributed by the package of the innermost frame in one of: mcpcache, mcp, fastmcp, httpx, httpcore,
pydantic, starlette, sse_starlette, uvicorn, anyio, redis (else "other"), and, separately, by the
mcpcache function on the stack (if any).

Run:  python benchmarks/gateway_memory.py                 (50 MB notebook, first read and a read from the store)
      python benchmarks/gateway_memory.py --size 10MB
"""

from __future__ import annotations

import argparse
import asyncio
import linecache
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import uvicorn

from mcpcache.bench.hops import demo_servers
from mcpcache.bench.runner import parse_size
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.gateway.app import build_gateway, open_store
from mcpcache.gateway.config import parse_config
from mcpcache.processes import RedisServer, free_port

PACKAGES = (
    "mcpcache",
    "fastmcp",
    "mcp",
    "httpx",
    "httpcore",
    "pydantic_core",
    "pydantic",
    "sse_starlette",
    "starlette",
    "uvicorn",
    "anyio",
    "redis",
    "json",
    "asyncio",
)
MiB = 1024 * 1024

CALLER = """
import asyncio, sys
import mcp
from mcp.client.streamable_http import streamable_http_client

async def main(url):
    transport = streamable_http_client(url, max_sse_event_size=1024 * 1024 * 1024)
    async with mcp.Client(transport, mode="legacy") as client:
        for _ in range(2):
            result = await client.call_tool("read_notebook", {"path": "big.ipynb"})
            assert not result.is_error
            print("read", flush=True)
            sys.stdin.readline()

asyncio.run(main(sys.argv[1]))
"""


def package_of(filename: str) -> str:
    parts = Path(filename).parts
    for package in PACKAGES:
        if package in parts or any(part.startswith(package + ".") for part in parts):
            return package
    return "other"


class Sampler:
    """Snapshots the traced memory whenever it reaches a new high (by `step`), from a thread of its own."""

    def __init__(self, step: float = 1.05) -> None:
        self.step = step
        self.snapshot: tracemalloc.Snapshot | None = None
        self.high = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.02):
            current, _ = tracemalloc.get_traced_memory()
            if current > self.high * self.step:
                self.high = current
                self.snapshot = tracemalloc.take_snapshot()


def attribute(snapshot: tracemalloc.Snapshot) -> dict[str, Any]:
    by_package: Counter[str] = Counter()
    by_mcpcache: Counter[str] = Counter()
    blocks: list[float] = []
    for stat in snapshot.statistics("traceback"):
        if stat.size < 256 * 1024:
            continue
        blocks.append(round(stat.size / MiB, 1))
        frames = list(reversed(stat.traceback))  # tracemalloc lists the oldest first: the innermost first here
        inner = next((package_of(f.filename) for f in frames if package_of(f.filename) != "other"), "other")
        by_package[inner] += stat.size
        ours = [f for f in frames if package_of(f.filename) == "mcpcache"][:3]
        if ours:
            where = " < ".join(f"{Path(f.filename).name}:{f.lineno}" for f in ours)
            line = linecache.getline(ours[0].filename, ours[0].lineno).strip()
            by_mcpcache[f"{where} ({line[:60]})"] += stat.size
    return {
        "total_mib": sum(stat.size for stat in snapshot.statistics("filename")) / MiB,
        "large_blocks_by_package_mib": {k: round(v / MiB, 1) for k, v in by_package.most_common()},
        "large_blocks_by_mcpcache_line_mib": {k: round(v / MiB, 1) for k, v in by_mcpcache.most_common(12)},
        "largest_blocks_mib": sorted(blocks, reverse=True)[:12],
    }


async def main_async(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="mcpcache-gateway-memory-"))
    notebooks = folder / "notebooks"
    notebooks.mkdir()
    generate_notebook_of_size(notebooks / "big.ipynb", parse_size(args.size))
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    try:
        with (
            RedisServer(binary, extra=("--dir", str(folder))) as redis_server,
            demo_servers(notebooks, {"up": ("--no-revalidation",)}) as ports,
        ):
            config = parse_config(
                f"""[store]
redis = "{redis_server.url}"
namespace = "memory"

[upstreams.demo]
url = "http://127.0.0.1:{ports["up"]}/mcp"

[upstreams.demo.tools.read_notebook]
ttl_ms = 60000
scope = "public"
"""
            )
            assert config.store is not None
            gateway = build_gateway(config, store=open_store(config.store))
            port = free_port()
            server = uvicorn.Server(
                uvicorn.Config(gateway.server.http_app(path="/mcp"), host="127.0.0.1", port=port, log_level="warning")
            )
            serving = asyncio.create_task(server.serve())
            while not server.started:  # noqa: ASYNC110 (uvicorn offers no event to wait on)
                await asyncio.sleep(0.05)
            tracemalloc.start(args.frames)
            baseline, _ = tracemalloc.get_traced_memory()
            caller = subprocess.Popen(  # noqa: ASYNC220 (started once, read from a thread)
                [sys.executable, "-c", CALLER, f"http://127.0.0.1:{port}/mcp"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert caller.stdin is not None
            assert caller.stdout is not None
            for label in ("first read (upstream, stored)", "second read (from the store)"):
                tracemalloc.reset_peak()
                sampler = Sampler()
                sampler.high, _ = tracemalloc.get_traced_memory()
                sampler.thread.start()
                began = time.perf_counter()
                line = await asyncio.to_thread(caller.stdout.readline)
                assert line.strip() == "read", line
                sampler.stop.set()
                sampler.thread.join()
                _, peak = tracemalloc.get_traced_memory()
                above = (peak - baseline) / MiB
                print(f"\n{label}: {time.perf_counter() - began:.1f} s; traced peak {above:.1f} MiB above idle")
                if sampler.snapshot is not None:
                    for key, value in attribute(sampler.snapshot).items():
                        print(f"  {key}: {value}")
                caller.stdin.write("\n")
                caller.stdin.flush()
            caller.wait(timeout=60)
            tracemalloc.stop()
            server.should_exit = True
            await serving
            await gateway.aclose()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="50MB")
    parser.add_argument("--frames", type=int, default=30)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
