"""Where a read after an edit spends its CPU, phase by phase, in one process (benchmarks/notes/delta-after-edit.md).

The demo server (in process, over memory streams) serves the 5 MB notebook `mcpcache bench` reads (seed
42); a `ToolCache` over a SQLite file reads it, a stock client edits one cell per round. Each phase is a
function of the cache or the server, wrapped to add the CPU time of its thread (`time.thread_time`, which
a loaded machine distorts less than wall time). The first read after an edit is shown apart: each side
computes every leaf of its base then, and keeps them for the next.

Run:  python benchmarks/delta_phases.py [ROUNDS]     (about 20 s)
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp.client._memory import InMemoryTransport

import mcpcache.client.cache as cache_module
import mcpcache.client.keeping as keeping_module
import mcpcache.client.patching as patching_module
import mcpcache.client.wrappers as wrappers
import mcpcache.server.fastmcp.raw_tags as raw_tags_module
import mcpcache.server.raw_deltas as raw_deltas_module
from mcpcache.client import ToolCache
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.demo.server import build_demo_server
from mcpcache.stores import SQLiteStore

_spent: dict[str, float] = {}


def _timed(owner: Any, name: str, phase: str, *, is_async: bool = False) -> None:
    """Wrap `owner.name` so that each call adds its thread's CPU time to `_spent[phase]`."""
    inner: Callable[..., Any] = getattr(owner, name)
    if is_async:

        @functools.wraps(inner)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return await inner(*args, **kwargs)
            finally:
                _spent[phase] = _spent.get(phase, 0.0) + time.thread_time() - start

        setattr(owner, name, wrapper)
        return

    @functools.wraps(inner)
    def plain(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            _spent[phase] = _spent.get(phase, 0.0) + time.thread_time() - start

    setattr(owner, name, plain)


def instrument() -> None:
    _timed(cache_module, "patch_answer", "client: patch_answer (apply + digest)")
    _timed(patching_module.delta, "apply", "client:   apply ops")
    _timed(patching_module, "updated", "client:   tree update")
    _timed(patching_module, "leaves_of", "client:   tree leaves from scratch")
    _timed(wrappers._SessionConnection, "validate", "client: schema check", is_async=True)
    _timed(keeping_module, "encode_entry", "client: encode for the store")
    _timed(keeping_module, "copy_result", "client: held copy")
    _timed(raw_tags_module, "raw_tag_leaves", "server: raw_tag_leaves")
    _timed(raw_deltas_module, "updated", "server: tree update")
    _timed(raw_deltas_module, "leaves_of", "server: tree leaves from scratch")


async def run(rounds: int) -> None:
    folder = Path(tempfile.mkdtemp())
    generate_notebook_of_size(folder / "nb.ipynb", 5_000_000, seed=42)
    server = build_demo_server(folder, ttl_ms=0)
    read = {"path": "nb.ipynb"}
    per: dict[str, list[float]] = {}
    walls: list[float] = []
    transport = InMemoryTransport(server._mcp_server)
    async with mcp.Client(transport) as stock, mcp.Client(InMemoryTransport(server._mcp_server)) as client:
        cache = ToolCache(SQLiteStore(folder / "cache.db"))
        view = cache.wrap(client, server_id="demo")
        await view.call("read_notebook", read)
        for number in range(rounds + 1):
            await stock.call_tool("edit_cell", {"path": "nb.ipynb", "index": 3 + 7 * number, "source": f"x = {number}"})
            _spent.clear()
            wall, cpu = time.perf_counter(), time.process_time()
            call = await view.call("read_notebook", read)
            wall, cpu = (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000
            assert call.outcome.status == "patched", call.outcome
            if number:
                walls.append(wall)
                per.setdefault("process CPU, the whole read", []).append(cpu)
                for phase, spent in _spent.items():
                    per.setdefault(phase, []).append(spent * 1000)
            else:
                first = {phase: round(spent * 1000, 1) for phase, spent in _spent.items()}
                print(f"the first read after an edit (leaves from scratch), ms: {first}")
            await cache.flush()  # the write behind the patched answer, before the next round
    print(f"{rounds} rounds, load average {os.getloadavg()[0]:.1f}; wall median {statistics.median(walls):.1f} ms")
    for phase in sorted(per):
        values = per[phase]
        print(f"  {phase:<42} {statistics.median(values):7.2f} ms (min {min(values):.2f})")


if __name__ == "__main__":
    instrument()
    anyio.run(run, int(sys.argv[1]) if len(sys.argv) > 1 else 10)
