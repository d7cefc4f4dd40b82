"""Where a read after an edit spends its time, with deltas on and off (docs/benchmarks.md, "Delta replies:
the client half").

The demo server (`mcpcache demo-server --ttl-ms 0`, its own process, streamable HTTP on 127.0.0.1) serves
the 5 MB notebook `mcpcache bench` reads (seed 42). Two `ToolCache`s over SQLite files, one with deltas and
one without, each on its own `mcp.Client`, and a stock `mcp.Client`, read it. Each round edits one cell
(through the stock client, so both caches see the change only by revalidating), then reads once with each,
in an order shuffled per round. The cached reads are timed by phase, by wrapping the cache's own steps:

- server and wire: `Connection.send`, from the request going out to the parsed reply (the server runs
  the tool, converts the answer and computes the delta or sends the whole answer; the client transport
  receives and parses it);
- patch: the private copy of the stored answer, the ops and the digest (`patch_answer`, deltas only);
- schema check: the client's output-schema check of the new answer (`Connection.validate`);
- store: encoding the answer for the store and saving it (`Keeping.keep`).

Figures are medians over the rounds, with p10-p90, and the stock read of the same round over each cached
read (the speed-up, per round).

Run:  python benchmarks/delta_client.py             (about a minute; --rounds N)
      python benchmarks/delta_client.py --quick     (a smoke run)
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp.client.streamable_http import streamable_http_client

import mcpcache.client.cache as cache_module
import mcpcache.client.keeping as keeping
import mcpcache.client.wrappers as wrappers
from mcpcache.bench.common import machine, percentile
from mcpcache.bench.worker import HTTP_MAX_EVENT_BYTES
from mcpcache.client import CacheSettings, ToolCache
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.processes import accepts, free_port, stop_process
from mcpcache.stores import SQLiteStore

NOTEBOOK = "notebook-5MB.ipynb"
PHASES = ("server and wire", "patch", "schema check", "store")

_spent: dict[str, float] = {}


def _timed(owner: Any, name: str, phase: str, *, is_async: bool = True) -> None:
    """Wrap `owner.name` so that each call adds its wall time to `_spent[phase]`."""
    inner = getattr(owner, name)
    if is_async:

        @functools.wraps(inner)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await inner(*args, **kwargs)
            finally:
                _spent[phase] = _spent.get(phase, 0.0) + time.perf_counter() - start

    else:

        @functools.wraps(inner)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                _spent[phase] = _spent.get(phase, 0.0) + time.perf_counter() - start

    setattr(owner, name, wrapper)


def instrument() -> None:
    _timed(wrappers._SessionConnection, "send", "server and wire")
    _timed(wrappers._SessionConnection, "validate", "schema check")
    _timed(cache_module, "patch_answer", "patch", is_async=False)
    _timed(keeping.Keeping, "keep", "store")


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} ({percentile(values, 0.1):.1f}-{percentile(values, 0.9):.1f})"


async def run(rounds: int, folder: Path, seed: int, port: int, server: subprocess.Popen[bytes]) -> dict[str, Any]:
    while not accepts(port):
        if server.poll() is not None:
            raise RuntimeError("the demo server exited before listening")
        await anyio.sleep(0.05)
    url = f"http://127.0.0.1:{port}/mcp"

    def connect() -> mcp.Client:
        return mcp.Client(streamable_http_client(url, max_sse_event_size=HTTP_MAX_EVENT_BYTES))

    read = {"path": NOTEBOOK}
    samples: dict[str, list[dict[str, float]]] = {"deltas": [], "no deltas": [], "stock": []}
    statuses: dict[str, list[str]] = {"deltas": [], "no deltas": []}
    async with connect() as stock, connect() as with_deltas, connect() as without:
        views = {
            "deltas": ToolCache(SQLiteStore(folder / "deltas.db"), CacheSettings(deltas=True)).wrap(
                with_deltas, server_id=url
            ),
            "no deltas": ToolCache(SQLiteStore(folder / "whole.db"), CacheSettings(deltas=False)).wrap(
                without, server_id=url
            ),
        }
        for view in views.values():
            await view.call("read_notebook", read)  # the first read: a miss for both, stored
        rng = random.Random(seed)
        for number in range(rounds):
            await stock.call_tool("edit_cell", {"path": NOTEBOOK, "index": 0, "source": f"x = {number}"})
            for who in rng.sample(list(samples), len(samples)):
                _spent.clear()
                start = time.perf_counter()
                if who == "stock":
                    await stock.call_tool("read_notebook", read)
                else:
                    call = await views[who].call("read_notebook", read)
                    statuses[who].append(call.outcome.status)
                total = time.perf_counter() - start
                samples[who].append({"total": total * 1000, **{k: v * 1000 for k, v in _spent.items()}})
    return {"samples": samples, "statuses": statuses}


def report(result: dict[str, Any], rounds: int, size: str) -> None:
    samples = result["samples"]
    stock = [s["total"] for s in samples["stock"]]
    print(f"\nA read after a one-cell edit of the {size} notebook, {rounds} rounds; ms, median (p10-p90)")
    print(f"{'phase':<18}{'deltas':>26}{'no deltas':>26}")
    for phase in (*PHASES, "total"):
        cells = [spread([s.get(phase, 0.0) for s in samples[who]]) for who in ("deltas", "no deltas")]
        print(f"{phase:<18}{cells[0]:>26}{cells[1]:>26}")
    print(f"{'stock read':<18}{spread(stock):>26}")
    for who in ("deltas", "no deltas"):
        ratios = [s / mine["total"] for s, mine in zip(stock, samples[who], strict=True)]
        print(f"stock read over {who}, per round: {spread(ratios)}x; outcomes {sorted(set(result['statuses'][who]))}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else args.rounds
    instrument()
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        generate_notebook_of_size(folder / NOTEBOOK, 1_000_000 if args.quick else 5_000_000, seed=42)
        started = time.monotonic()
        port = free_port()
        command = [sys.executable, "-m", "mcpcache", "demo-server", "--dir", str(folder), "--ttl-ms", "0"]
        server = subprocess.Popen([*command, "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            result = anyio.run(run, rounds, folder, args.seed, port, server)
        finally:
            stop_process(server)
    load = os.getloadavg()
    report(result, rounds, "1 MB" if args.quick else "5 MB")
    about = machine()
    print(f"\n{time.monotonic() - started:.0f} s; load average {load[0]:.1f}; {about.get('cpu', '?')}")


if __name__ == "__main__":
    main()
