"""What `SQLiteStore.peek_now`'s kept peeks cost a revalidation, which they cannot serve (every revalidation
writes its confirmation, which changes SQLite's `data_version`, so the next lookup peeks through a thread).

The demo server (its own process, streamable HTTP on 127.0.0.1, a validator and ttl 0) serves a 5 MB
notebook; three `ToolCache`s revalidate it: over `SQLiteStore` (which keeps peeks), over a subclass of it
(which `peek_now` leaves alone, as before the kept peeks existed) and over `MemoryStore`. Rounds alternate
the order; a round's value is the median of its calls. Prints median and p10-p90 over the rounds, ms.

Run:  python benchmarks/sqlite_peeks.py                 (25 rounds of 5 calls: about a minute)
      python benchmarks/sqlite_peeks.py --rounds 5       (a smoke run)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hot_paths import NOTEBOOK_BYTES, http_client, http_demo_server

from mcpcache.client import ToolCache
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.stores import MemoryStore, SQLiteStore


class PeeksLeftAlone(SQLiteStore):
    """`SQLiteStore` as it was before `peek_now` kept peeks: a subclass is always asked through `peek_many`."""


async def run(rounds: int, calls: int) -> dict[str, list[float]]:
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcpcache-peeks-")))
        (tmp / "notebooks").mkdir()
        generate_notebook_of_size(tmp / "notebooks" / "nb.ipynb", NOTEBOOK_BYTES, seed=5)
        url = stack.enter_context(http_demo_server(tmp / "notebooks", ["--validator", "--ttl-ms", "0"], sys.stderr))
        args = {"path": "nb.ipynb"}
        stores = {
            "SQLiteStore": SQLiteStore(tmp / "kept.db"),
            "SQLiteStore, peeks left alone": PeeksLeftAlone(tmp / "plain.db"),
            "MemoryStore": MemoryStore(),
        }
        async with contextlib.AsyncExitStack() as clients:
            views: dict[str, Any] = {}
            for name, store in stores.items():
                views[name] = ToolCache(store).wrap(await clients.enter_async_context(http_client(url)))
                await views[name].call("read_notebook", args)
            per_round: dict[str, list[float]] = {name: [] for name in views}
            for index in range(rounds):
                order = list(views) if index % 2 else list(reversed(views))
                for name in order:
                    times = []
                    for _ in range(calls):
                        began = time.perf_counter()
                        call = await views[name].call("read_notebook", args)
                        times.append(time.perf_counter() - began)
                        assert call.outcome.status == "revalidated", call.outcome
                    per_round[name].append(statistics.median(times) * 1000)
            for store in stores.values():
                await store.close()
    return per_round


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    per_round = asyncio.run(run(args.rounds, args.calls))
    print(f"revalidations of a 5 MB notebook, {args.rounds} rounds of {args.calls}; ms per call, median [p10-p90]\n")
    print("| store | ms per revalidation |")
    print("|---|---|")
    for name, values in per_round.items():
        ordered = sorted(values)
        p10, p90 = ordered[len(ordered) // 10], ordered[-1 - len(ordered) // 10]
        print(f"| {name} | {statistics.median(values):.2f} [{p10:.2f}-{p90:.2f}] |")


if __name__ == "__main__":
    main()
