"""How long References blocks the event loop on a large result (by default the demo's 8.4 MB notebook read).

A heartbeat task sleeps 1 ms at a time on the same loop and records how late it wakes. For each operation the
script prints its wall time, the longest stall (the longest time nothing else on the loop could run: other tool
calls, a server's other sessions, keep-alives) and the sum of the stalls over 20 ms (shorter ones are mostly the
machine's own scheduling noise on a busy host). Each operation starts after a full garbage collection, so a
collection of an earlier round's garbage is not charged to it.

Operations: `for_model` (measure, store by reference; the default References), `for_model` with a 64 KB view
(also shortens, counting the tokens of every member it elides), and `load` of the stored payload.

Run:  python benchmarks/refs_loop.py [--mb 8.4] [--rounds 5] [--json out.json]
To compare two trees, run it alternately with PYTHONPATH pointing at each (interleaved rounds).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import fastmcp

from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.demo.server import build_demo_server
from mcpcache.refs import References
from mcpcache.stores import MemoryStore

TICK_S = 0.001
STALL_S = 0.020


async def heartbeat_during(work: Callable[[], Awaitable[Any]]) -> tuple[float, float, float]:
    """(wall seconds of `work`, longest stall, sum of stalls) while `work` runs on this loop."""
    stalls: list[float] = []
    done = anyio.Event()

    async def beat() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await anyio.sleep(TICK_S)
            now = time.perf_counter()
            stalls.append(now - last - TICK_S)
            last = now

    async with anyio.create_task_group() as tg:
        tg.start_soon(beat)
        await anyio.sleep(0.01)  # the heartbeat is running before the work starts
        started = time.perf_counter()
        await work()
        wall = time.perf_counter() - started
        done.set()
    return wall, max(stalls, default=0.0), sum(stall for stall in stalls if stall > STALL_S)


async def main(mb: float, rounds: int, out: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        generate_notebook_of_size(Path(folder) / "big.ipynb", int(mb * 1_000_000), validate=False)
        async with fastmcp.Client(build_demo_server(folder)) as client:
            result = await client.call_tool_mcp("read_notebook", {"path": "big.ipynb"})
    plain = References(MemoryStore(), max_conversation_bytes=None)
    viewed = References(MemoryStore(), max_view_bytes=65_536, max_conversation_bytes=None)
    await plain.for_model(result, server="demo", tool="read_notebook")  # loads the tokenizer, warms caches
    stored = await plain.for_model(result, server="demo", tool="read_notebook")
    assert stored.uri is not None
    uri = stored.uri

    operations: dict[str, Callable[[], Awaitable[Any]]] = {
        "for_model": lambda: plain.for_model(result, server="demo", tool="read_notebook"),
        "for_model, 64 KB view": lambda: viewed.for_model(result, server="demo", tool="read_notebook"),
        "load": lambda: plain.load(uri),
    }
    samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in operations}
    for _ in range(rounds):
        for name, work in operations.items():
            gc.collect()
            samples[name].append(await heartbeat_during(work))
    print(f"{stored.size_bytes / 1e6:.1f} MB payload, {rounds} rounds (median; max of the longest stall)")
    print(f"{'operation':<24}{'wall ms':>10}{'longest stall ms':>18}{'stalls >20 ms':>15}")
    figures: dict[str, dict[str, float]] = {}
    for name, runs in samples.items():
        wall = statistics.median(r[0] for r in runs) * 1000
        longest = max(r[1] for r in runs) * 1000
        stalled = statistics.median(r[2] for r in runs) * 1000
        figures[name] = {"wall_ms": wall, "longest_stall_ms": longest, "stalled_over_20ms_ms": stalled}
        print(f"{name:<24}{wall:>10.0f}{longest:>18.0f}{stalled:>15.0f}")
    return {"payload_bytes": stored.size_bytes, "operations": figures}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=8.4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    options = parser.parse_args()
    document = anyio.run(main, options.mb, options.rounds, options.json)
    if options.json is not None:
        options.json.write_text(json.dumps(document, indent=2))
