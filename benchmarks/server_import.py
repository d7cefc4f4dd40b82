"""What importing mcpcache's FastMCP adapter costs on top of FastMCP itself.

Each run is a fresh interpreter that imports FastMCP and builds a server (what any FastMCP user pays),
then imports `mcpcache.server.fastmcp` and reports the wall and CPU time of that second import and the
number of modules it added (CPU time is the steadier figure on a machine shared with other work). Runs
of the trees being compared (by default the working tree only; add `--compare PATH` for another
checkout, e.g. the main branch) interleave, so a noisy machine slows them alike. Medians, min..max.

Run:  python benchmarks/server_import.py [--runs 15] [--compare /path/to/other/checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROBE = """
import sys, time
from fastmcp import FastMCP
FastMCP("probe")
before = set(sys.modules)
start, cpu = time.perf_counter(), time.process_time()
import mcpcache.server.fastmcp
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
added = set(sys.modules) - before
print(__import__("json").dumps({"ms": elapsed * 1000, "cpu_ms": cpu * 1000, "modules": len(added),
      "memo": "fastmcp.server.middleware.caching" in added}))
"""


def run_once(tree: Path, pycache: str) -> dict[str, float]:
    # Compiled bytecode, as an installed package has it: PYTHONDONTWRITEBYTECODE would make every run
    # compile mcpcache from source, which is not what a user pays. The cache goes to a folder of its
    # own, and the run starts outside any checkout so that only PYTHONPATH decides what is imported.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"PYTHONPATH": str(tree), "PYTHONPYCACHEPREFIX": os.path.join(pycache, tree.name)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=pycache, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--compare", type=Path, action="append", default=[])
    args = parser.parse_args()
    trees = [Path(__file__).resolve().parent.parent, *args.compare]
    results: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory() as pycache:
        for tree in trees:
            run_once(tree, pycache)  # writes the bytecode
        for _ in range(args.runs):
            for tree in trees:
                results[tree].append(run_once(tree, pycache))
    print("| tree | wall ms: median (min..max) | CPU ms: median (min..max) | modules added | memo imported |")
    print("|---|---|---|---|---|")
    for tree, runs in results.items():
        ms = [r["ms"] for r in runs]
        cpu = [r["cpu_ms"] for r in runs]
        print(
            f"| {tree} | {statistics.median(ms):.1f} ({min(ms):.1f}..{max(ms):.1f}) "
            f"| {statistics.median(cpu):.1f} ({min(cpu):.1f}..{max(cpu):.1f}) "
            f"| {int(statistics.median(r['modules'] for r in runs))} | {any(r['memo'] for r in runs)} |"
        )


if __name__ == "__main__":
    main()
