"""p50 and max latency of calls through a ToolCache over a SQLite file, per fault.

    python benchmarks/store_faults.py [--seconds 8]

A FastMCP server in the same process (memory transport) with one cached tool; the cache's store is a
SQLiteStore in a temporary folder. For each fault, calls alternate between a stored key (a fresh hit when
the store answers) and a new key (a miss and a save) for --seconds, and the table shows p50 and max:
- none: nothing wrong, for scale;
- exclusive lock: another OS process holds BEGIN EXCLUSIVE (with an uncommitted write);
- pinned WAL: another OS process holds a read transaction, so the write-ahead log cannot be reset;
- corrupt file: garbage written over the file's pages before the store opens it (moved aside on first use).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from fastmcp import Client, FastMCP

from mcpcache.client import ToolCache
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.stores import Item, SQLiteStore

HOLD = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
if sys.argv[2] == "read":
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM items").fetchall()
else:
    conn.execute("BEGIN EXCLUSIVE")
    conn.execute("UPDATE items SET created_at = -1")
print("holding", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


def server() -> FastMCP:
    app = FastMCP("store-faults")

    @app.tool
    def read(key: str) -> dict[str, Any]:
        return {"key": key, "text": f"{key}: " + "x" * 2000}

    install(app, ToolPolicies({"read": CachePolicy(ttl_ms=600_000)}))
    return app


async def measure(fault: str, folder: Path, seconds: float) -> tuple[list[float], list[float]]:
    path = folder / f"{fault.replace(' ', '-')}.db"
    async with SQLiteStore(path) as seed:  # a store with something in it, as a fault would find it
        for i in range(50):
            await seed.save(f"seed{i}", Item({}, os.urandom(8000)))
    if fault == "corrupt file":
        data = bytearray(path.read_bytes())
        data[4096:] = os.urandom(len(data) - 4096)
        path.write_bytes(bytes(data))
    hits: list[float] = []
    news: list[float] = []
    holder: subprocess.Popen[str] | None = None
    async with SQLiteStore(path) as store:
        cache = ToolCache(store)
        async with Client(server()) as client:
            view = cache.wrap(client)
            if fault != "corrupt file":
                await view.call_mcp("read", {"key": "stored"})
            if fault in ("exclusive lock", "pinned WAL"):
                mode = "read" if fault == "pinned WAL" else "exclusive"
                holder = subprocess.Popen(  # noqa: ASYNC220 (started once, before the measured calls)
                    [sys.executable, "-c", HOLD, str(path), mode],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert holder.stdout is not None
                assert holder.stdout.readline().strip() == "holding"
            try:
                started, i = time.monotonic(), 0
                while time.monotonic() - started < seconds:
                    for bucket, key in ((hits, "stored"), (news, f"new{i}")):
                        t0 = time.monotonic()
                        await view.call_mcp("read", {"key": key})
                        bucket.append(time.monotonic() - t0)
                    i += 1
            finally:
                if holder is not None:
                    holder.communicate("\n", timeout=30)
    return hits, news


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:8.1f} {max(values) * 1000:8.1f}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    print(f"{'fault':16} {'calls':>6}  {'hit p50':>8} {'hit max':>8}  {'save p50':>8} {'save max':>8}  (ms)")
    with tempfile.TemporaryDirectory() as tmp:
        for fault in ("none", "exclusive lock", "pinned WAL", "corrupt file"):
            hits, news = await measure(fault, Path(tmp), args.seconds)
            print(f"{fault:16} {len(hits) + len(news):6}  {ms(hits)}  {ms(news)}")


if __name__ == "__main__":
    anyio.run(main)
