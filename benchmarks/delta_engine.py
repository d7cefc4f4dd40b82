"""What the delta engine (mcpcache.delta) costs, next to serialising the full answer and to python-json-patch.

The answers are real: the demo server's read_notebook on a ~5 MB generated notebook, through FastMCP's
in-memory client (FastMCP sends the notebook twice, as JSON text and as structuredContent, so the full
answer is about 10 MB). Three changes, each between two real reads:

- edit: a real `edit_cell` of a cell in the middle (its source grows by a line);
- insert: a code cell inserted in the middle of the file (every later cell is renumbered);
- delete: a cell deleted from the middle of the file (the same renumbering the other way);
- table: not a notebook but the other common shape, an answer of many small values: 5,000 rows of eight
  fields (seeded, about 1.2 MB with its JSON text), one value of one row in the middle changed.

For each change, in rounds that interleave every measurement (the machine is shared and noisy, so each
round's times are divided by that round's `orjson.dumps` of the full document and the ratios are what to
read):

- dumps: `orjson.dumps` of the new answer's document (what sending it in full costs at the least);
- diff: `mcpcache.delta.diff` with `max_bytes` half the full answer (what a server would pass);
- apply: `mcpcache.delta.apply` of those ops to the old document (copy-on-write, string splices);
- make_patch: `jsonpatch.make_patch` (python-json-patch) of the same two documents;
- jp apply: `jsonpatch.apply_patch(..., in_place=True)` of its own patch to a private copy made before the
  clock starts (it changes the document in place, so a real caller must copy first: see `copy`);
- jp apply+copy: `jsonpatch.apply_patch(...)` as it is meant to be called, copying the document itself;
- copy: the house's structural copy of the old document (mcpcache.client.tier's), the price of a private
  copy that in-place application needs and mcpcache.delta's copy-on-write does not pay.

Each sample is the best of `--inner` runs with the garbage collector off; a table row gives the median
over the rounds, the p10-p90 spread, and the median per-round ratio to dumps with its p10-p90.

Run:  python benchmarks/delta_engine.py              (about a minute)
      python benchmarks/delta_engine.py --quick      (a smoke test)
      python benchmarks/delta_engine.py --json out.json
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import fastmcp
import jsonpatch
import mcp_types as mt
import orjson

from mcpcache.bench.common import machine, percentile
from mcpcache.client.tier import _copy_value  # the house's structural copy; private, used here to price it
from mcpcache.delta import apply, diff, document_of
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.demo.server import build_demo_server

NOTEBOOK = "big.ipynb"
NOTEBOOK_BYTES = 5_000_000


async def answers(directory: Path) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """(old, new) documents of read_notebook around each change."""
    path = generate_notebook_of_size(directory / NOTEBOOK, NOTEBOOK_BYTES, seed=42)
    server = build_demo_server(directory)
    pairs: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}

    def rewrite(change: Callable[[list[Any]], object]) -> None:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        change(notebook["cells"])
        path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")

    async with fastmcp.Client(server) as client:

        async def read() -> mt.CallToolResult:
            result = await client.call_tool_mcp("read_notebook", {"path": NOTEBOOK})
            assert not result.is_error
            assert result.structured_content is not None
            return result

        first = await read()
        cells = first.structured_content["cells"] if first.structured_content else []
        middle = len(cells) // 2
        source = cells[middle]["source"] + "\nprint(df.describe())"
        await client.call_tool_mcp("edit_cell", {"path": NOTEBOOK, "index": middle, "source": source})
        second = await read()
        pairs["edit"] = (document_of(first), document_of(second))

        cell = {"cell_type": "code", "id": "inserted", "metadata": {}, "execution_count": None, "outputs": []}
        rewrite(lambda cells: cells.insert(middle, {**cell, "source": ["x = df.mean()\n", "x"]}))
        third = await read()
        pairs["insert"] = (document_of(second), document_of(third))

        rewrite(lambda cells: cells.pop(middle // 2))
        fourth = await read()
        pairs["delete"] = (document_of(third), document_of(fourth))
    return pairs


def table_answers() -> tuple[dict[str, Any], dict[str, Any]]:
    rng = random.Random(42)
    rows = [
        {
            "id": index,
            "name": f"customer-{index}",
            "region": rng.choice(("north", "south", "east", "west")),
            "revenue": round(rng.gauss(100, 35), 3),
            "units": rng.randint(0, 500),
            "active": rng.random() < 0.5,
            "churned_at": None,
            "note": "".join(rng.choices("abcdefgh ", k=rng.randint(0, 24))),
        }
        for index in range(5000)
    ]

    def document(table: list[dict[str, Any]]) -> dict[str, Any]:
        structured = {"kind": "table", "rows": table}
        text = orjson.dumps(structured).decode()
        return {"content": [{"type": "text", "text": text}], "structuredContent": structured}

    changed = [dict(row) for row in rows]
    changed[2500]["revenue"] = 1.5
    return document(rows), document(changed)


def best_of(fn: Callable[[], object], inner: int) -> float:
    """The best of `inner` runs, in milliseconds, with the collector off (as timeit does)."""
    gc.collect()
    gc.disable()
    try:
        best = float("inf")
        for _ in range(inner):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
    finally:
        gc.enable()
    return best * 1e3


def measure(old: dict[str, Any], new: dict[str, Any], rounds: int, inner: int) -> dict[str, Any]:
    full = len(orjson.dumps(new))
    ops = diff(old, new, max_bytes=full // 2)
    assert ops is not None, "no delta within half the answer"
    assert apply(old, ops) == new
    theirs = jsonpatch.make_patch(old, new).patch
    assert jsonpatch.apply_patch(_copy_value(old), theirs) == new

    copies: list[dict[str, Any]] = []

    def jp_in_place() -> None:
        jsonpatch.apply_patch(copies.pop(), theirs, in_place=True)

    timed: dict[str, Callable[[], object]] = {
        "dumps": lambda: orjson.dumps(new),
        "diff": lambda: diff(old, new, max_bytes=full // 2),
        "apply": lambda: apply(old, ops),
        "make_patch": lambda: jsonpatch.make_patch(old, new),
        "jp apply": jp_in_place,
        "jp apply+copy": lambda: jsonpatch.apply_patch(old, theirs),
        "copy": lambda: _copy_value(old),
    }
    samples: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(rounds):
        for name, fn in timed.items():  # interleaved: every measurement once per round
            if name == "jp apply":
                copies[:] = [_copy_value(old) for _ in range(inner)]
            samples[name].append(best_of(fn, 1 if name == "make_patch" else inner))
    ratios = {
        name: [value / dumps for value, dumps in zip(values, samples["dumps"], strict=True)]
        for name, values in samples.items()
    }
    return {
        "full_bytes": full,
        "ops": len(ops),
        "ops_bytes": len(orjson.dumps(ops)),
        "make_patch_bytes": len(orjson.dumps(theirs)),
        "make_patch_ops": len(theirs),
        "ms": {name: summary(values) for name, values in samples.items()},
        "ratio_to_dumps": {name: summary(values) for name, values in ratios.items()},
    }


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "p10": percentile(values, 0.1), "p90": percentile(values, 0.9)}


def render(results: dict[str, dict[str, Any]], rounds: int, inner: int, out: Any) -> None:
    about = machine(("mcpcache", "orjson", "jsonpatch", "jsonpointer", "fastmcp"))
    title = "Delta engine on a ~5 MB notebook answer and a table"
    print(f"{title} ({rounds} rounds, best of {inner} per sample)", file=out)
    print(f"{about['cpu']}, {about['cores']} cores, {about['python']}; {about['libraries']}\n", file=out)
    print("| change | full answer | ours: ops, bytes | make_patch: ops, bytes |", file=out)
    print("|---|---:|---:|---:|", file=out)
    for change, result in results.items():
        print(
            f"| {change} | {result['full_bytes']:,} B | {result['ops']}, {result['ops_bytes']:,} B "
            f"| {result['make_patch_ops']}, {result['make_patch_bytes']:,} B |",
            file=out,
        )
    print("\nms: median (p10-p90); x dumps: the median of per-round ratios to orjson.dumps (p10-p90)\n", file=out)
    names = list(next(iter(results.values()))["ms"])
    print("| change | " + " | ".join(names) + " |", file=out)
    print("|---|" + "---:|" * len(names), file=out)
    for change, result in results.items():
        cells = []
        for name in names:
            ms, ratio = result["ms"][name], result["ratio_to_dumps"][name]
            cells.append(
                f"{ms['median']:.2f} ({ms['p10']:.2f}-{ms['p90']:.2f}) ms<br>"
                f"{ratio['median']:.2f}x ({ratio['p10']:.2f}-{ratio['p90']:.2f})"
            )
        print(f"| {change} | " + " | ".join(cells) + " |", file=out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--inner", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="3 rounds, best of 1: a smoke test")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    arguments = parser.parse_args(argv)
    rounds, inner = (3, 1) if arguments.quick else (arguments.rounds, arguments.inner)
    with tempfile.TemporaryDirectory() as directory:
        pairs = anyio.run(answers, Path(directory))
    pairs["table"] = table_answers()
    results = {change: measure(old, new, rounds, inner) for change, (old, new) in pairs.items()}
    render(results, rounds, inner, sys.stdout)
    if arguments.json:
        arguments.json.write_text(json.dumps({"rounds": rounds, "inner": inner, "results": results}, indent=1))


if __name__ == "__main__":
    main()
