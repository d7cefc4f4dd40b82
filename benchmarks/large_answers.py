"""Large answers end to end: what one read of a 50 MB notebook costs the stores, the tool cache and the gateway.

Three parts, each against real parts over streamable HTTP on 127.0.0.1 (the demo server started here,
a redis-server and the gateway started here on free ports, all stopped by PID):

- `stores`: the answer the demo server sends for the notebook, then per store (a SQLite file, Redis): its
  size as sent and as stored, the time to encode, save, peek, load and decode it, best of `--repeat`;
- `cache`: a `ToolCache` per store in front of the demo server with a validator (ttl 0: every read is a
  revalidation). Read 1 fetches and stores; a second `ToolCache` over the same store (a new process, as far
  as the decoded tier knows) revalidates and must load the body; its next read revalidates from its decoded
  tier. Each read's outcome, reason and time, and whether any read fell back to a full fetch;
- `gateway`: `python -m mcpcache gateway` with a `[store]` in front of the demo server without mcpcache; one
  stock client reads the notebook through it twice (a miss that fetches and stores, then a hit served from
  the store). The gateway's peak RSS (`VmHWM` from /proc) over its RSS before the first read, against the
  answer's size on the wire.

Run:  python benchmarks/large_answers.py                      (50 MB notebook, every part: a few minutes)
      python benchmarks/large_answers.py --size 5MB --parts stores,cache    (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp.client.streamable_http import streamable_http_client

from mcpcache.bench.common import machine
from mcpcache.bench.hops import demo_servers
from mcpcache.bench.runner import parse_size
from mcpcache.client import ToolCache
from mcpcache.client.entries import decode_result, encode_entry, encode_result
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.processes import RedisServer, free_port, stop_process, wait_until_listening
from mcpcache.stores import Item, RedisStore, SQLiteStore, Store

NOTEBOOK = "big.ipynb"
ARGS = {"path": NOTEBOOK}
MAX_EVENT_BYTES = 1024 * 1024 * 1024
PARTS = ("stores", "cache", "gateway")


def _load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


@asynccontextmanager
async def client(url: str) -> AsyncIterator[mcp.Client]:
    transport = streamable_http_client(url, max_sse_event_size=MAX_EVENT_BYTES)
    async with mcp.Client(transport, mode="legacy") as connected:
        yield connected


@asynccontextmanager
async def stores(folder: Path, redis_url: str) -> AsyncIterator[dict[str, Store]]:
    async with SQLiteStore(folder / "tools.db") as sqlite, RedisStore(redis_url, namespace="large") as redis:
        yield {"sqlite": sqlite, "redis": redis}


def _best(samples: list[float]) -> float:
    return min(samples) * 1000


async def part_stores(url: str, folder: Path, redis_url: str, repeat: int) -> dict[str, Any]:
    async with client(url) as connected:
        began = time.perf_counter()
        answer = await connected.call_tool("read_notebook", ARGS)
        fetched_s = time.perf_counter() - began
    encode: list[float] = []
    for _ in range(repeat):
        began = time.perf_counter()
        body = encode_entry(answer).body
        encode.append(time.perf_counter() - began)
    decode: list[float] = []
    for _ in range(repeat):
        began = time.perf_counter()
        assert decode_result(body) == answer
        decode.append(time.perf_counter() - began)
    out: dict[str, Any] = {
        "fetch_ms": fetched_s * 1000,
        "answer_bytes": len(encode_result(answer)),
        "stored_bytes": len(body),
        "encode_ms": _best(encode),
        "decode_ms": _best(decode),
    }
    async with stores(folder, redis_url) as opened:
        for name, store in opened.items():
            timings: dict[str, list[float]] = {"save": [], "peek": [], "load": []}
            try:
                for at in range(repeat):
                    item = Item(meta={"n": at}, body=body, group="tools", tag=f"t{at}")
                    began = time.perf_counter()
                    assert await store.save("large", item)
                    timings["save"].append(time.perf_counter() - began)
                    began = time.perf_counter()
                    await store.peek_many(["large"])
                    timings["peek"].append(time.perf_counter() - began)
                    began = time.perf_counter()
                    (loaded,) = await store.load_many(["large"])
                    timings["load"].append(time.perf_counter() - began)
                    assert loaded is not None
                    assert loaded.body == body
                await store.remove("large")
            except Exception as exc:  # a store that cannot move the body at all is a figure too
                out[name] = {"failed": f"{type(exc).__name__}: {exc}", "after_s": time.perf_counter() - began}
                continue
            out[name] = {op: _best(samples) for op, samples in timings.items()}
    return out


async def part_cache(url: str, folder: Path, redis_url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with stores(folder, redis_url) as opened, client(url) as connected:
        for name, store in opened.items():
            # A second cache over the same store has no decoded copy: its first read must load the body.
            first, second = ToolCache(store), ToolCache(store)
            reads = []
            for cache, label in (
                (first, "first read (fetch, store)"),
                (second, "new cache (load the body)"),
                (second, "again"),
            ):
                view = cache.wrap(connected, server_id=f"large-{name}")
                began = time.perf_counter()
                call = await view.call("read_notebook", ARGS)
                elapsed = time.perf_counter() - began
                assert not call.result.is_error
                reads.append(
                    {
                        "read": label,
                        "ms": elapsed * 1000,
                        "status": call.outcome.status,
                        "stored": call.outcome.stored,
                        "reason": call.outcome.reason,
                    }
                )
            out[name] = {"reads": reads, "store_failures": first.stats.store_failures + second.stats.store_failures}
            await first.clear()
    return out


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for pid {pid}")


def _start_gateway(config: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "mcpcache", "gateway", "--config", str(config), "--port", str(port)]
    with log.open("wb") as errors:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors)


async def part_gateway(url: str, folder: Path, redis_url: str, store: str) -> dict[str, Any]:
    config = folder / "gateway.toml"
    where = {
        "sqlite": f'sqlite = "{folder / "gateway.db"}"',
        "redis": f'redis = "{redis_url}"',
        "memory": "memory = true",
    }
    config.write_text(
        f"""
[store]
{where[store]}
namespace = "large-gateway"

[upstreams.demo]
url = "{url}"

[upstreams.demo.tools.read_notebook]
ttl_ms = 60000
scope = "public"
""",
        encoding="utf-8",
    )
    port = free_port()
    process = _start_gateway(config, port, folder / f"gateway-{store}.log")
    try:
        await anyio.to_thread.run_sync(wait_until_listening, process, port, 120.0, "mcpcache gateway")
        gateway_url = f"http://127.0.0.1:{port}/mcp"
        reads = []
        async with client(gateway_url) as connected:
            await connected.list_tools()
            await anyio.sleep(1.0)
            idle = _status(process.pid, "VmRSS")
            for label in ("first (upstream, stored)", "second (from the store)"):
                began = time.perf_counter()
                result = await connected.call_tool("read_notebook", ARGS)
                elapsed = time.perf_counter() - began
                assert not result.is_error
                reads.append({"read": label, "ms": elapsed * 1000, "peak_rss": _status(process.pid, "VmHWM")})
            answer = len(result.model_dump_json(by_alias=True, exclude_none=True).encode())
        peak = _status(process.pid, "VmHWM")
    finally:
        stop_process(process)
    stderr = (folder / f"gateway-{store}.log").read_text(errors="replace")
    return {
        "store": store,
        "answer_bytes": answer,
        "idle_rss": idle,
        "peak_rss": peak,
        "peak_over_idle": peak - idle,
        "ratio": (peak - idle) / answer,
        "reads": reads,
        "stderr_tail": stderr[-2000:],
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="mcpcache-large-"))
    source = args.notebook
    if source is None:
        generate_notebook_of_size(folder / NOTEBOOK, parse_size(args.size), seed=42)
    else:
        shutil.copy(source, folder / NOTEBOOK)
    document: dict[str, Any] = {
        "notebook_bytes": (folder / NOTEBOOK).stat().st_size,
        "machine": machine(),
        "load_before": _load_average(),
    }
    redis_binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    servers = {"plain": ("--no-revalidation",), "validator": ("--validator", "--ttl-ms", "0")}
    try:
        with RedisServer(redis_binary) as redis, demo_servers(folder, servers) as ports:
            plain = f"http://127.0.0.1:{ports['plain']}/mcp"
            validator = f"http://127.0.0.1:{ports['validator']}/mcp"
            if "stores" in args.parts:
                document["stores"] = await part_stores(plain, folder, redis.url, args.repeat)
            if "cache" in args.parts:
                document["cache"] = await part_cache(validator, folder, redis.url)
            if "gateway" in args.parts:
                document["gateway"] = [
                    await part_gateway(plain, folder, redis.url, store) for store in args.gateway_stores
                ]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    document["load_after"] = _load_average()
    return document


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def report(document: dict[str, Any]) -> None:
    print(
        f"notebook {mb(document['notebook_bytes'])}; load average {document['load_before']} before, "
        f"{document['load_after']} after"
    )
    stores = document.get("stores")
    if stores:
        print(
            f"\nanswer of {mb(stores['answer_bytes'])} fetched in {stores['fetch_ms']:.0f} ms; "
            f"stored form {mb(stores['stored_bytes'])}; "
            f"encode {stores['encode_ms']:.0f} ms, decode {stores['decode_ms']:.0f} ms (best of the repeats)"
        )
        for name in ("sqlite", "redis"):
            row = stores[name]
            if "failed" in row:
                print(f"  {name}: failed after {row['after_s']:.2f} s: {row['failed']}")
                continue
            print(f"  {name}: save {row['save']:.0f} ms, peek {row['peek']:.1f} ms, load {row['load']:.0f} ms")
    cache = document.get("cache")
    if cache:
        for name, run in cache.items():
            print(f"\nToolCache over {name} (store failures: {run['store_failures']}):")
            for read in run["reads"]:
                print(f"  {read['read']}: {read['status']} in {read['ms']:.0f} ms; {read['reason']}")
    for gateway in document.get("gateway") or []:
        print(
            f"\ngateway with a {gateway['store']} store: answer {mb(gateway['answer_bytes'])}; RSS idle "
            f"{mb(gateway['idle_rss'])}, peak {mb(gateway['peak_rss'])}: {mb(gateway['peak_over_idle'])} over idle, "
            f"{gateway['ratio']:.2f}x the answer"
        )
        for read in gateway["reads"]:
            print(f"  {read['read']}: {read['ms']:.0f} ms, peak RSS so far {mb(read['peak_rss'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="50MB", help="notebook size on disk (default 50MB)")
    parser.add_argument("--notebook", type=Path, help="read this notebook instead of generating one")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--gateway-stores", default="sqlite,redis", help="the gateway's store: sqlite, redis, memory")
    parser.add_argument("--repeat", type=int, default=3, help="store operations: best of this many")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    args.parts = tuple(part.strip() for part in args.parts.split(",") if part.strip())
    args.gateway_stores = tuple(s.strip() for s in args.gateway_stores.split(",") if s.strip())
    document = anyio.run(run, args)
    report(document)
    if args.json is not None:
        args.json.write_text(json.dumps(document, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
