"""What delta replies cost the server, and what keeping the history costs ordinary full reads.

The demo server (`mcpcache.demo.server.build_demo_server`) serves a generated 5 MB notebook from its
own process over stdio, as a real deployment would; the benchmark is its client. The server process's
CPU is read from /proc (`/proc/<pid>/task/*/schedstat`: nanoseconds on CPU, every thread), so it
includes everything the server does for a call: the tool body (reading and parsing the notebook),
FastMCP's conversion, mcpcache's tag, history and delta work, and the JSON-RPC serialisation and write
of the reply. It excludes the client.

1. A one-cell edit, then a conditional read that accepts deltas: the size of the delta reply as sent
   and of the full answer, and the server CPU of the delta reply next to that of a full read of the
   same notebook, on the raw-value tag path (`install()`'s default) and with a validator. Each round
   edits cell 40, asks for the delta against the tag the client holds, and reads in full; ratios are
   per round, reported as median (min..max).
2. Full reads with the history on (64 MiB, the default) and off (`delta_history_bytes=0`): the same
   calls on two servers, rounds interleaved, ratio on ÷ off per round. Measured twice: the server
   processes above (everything a read costs), and in process, inside FastMCP's middleware chain (a
   meter outside mcpcache: the body, the conversion, the tag and the history, without the transport),
   where the history's share of the cost is larger and so easier to see.
3. Where a delta's CPU goes, in process on the same answers (best of 7): recording the new answer
   (`version_of`), the base's document from the history, the diff, the digest.

Run:  python benchmarks/delta_server.py            (a few minutes)
      python benchmarks/delta_server.py --quick    (fewer rounds; a smoke test, not for the docs)
      python benchmarks/delta_server.py --json out.json
Linux only (/proc). It prints Markdown; docs/benchmarks.md holds a copy of one run.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import fastmcp
import mcp
import mcp_types as mt
import orjson
from fastmcp.server.middleware import Middleware
from mcp.client.stdio import stdio_client

from mcpcache import delta
from mcpcache.bench.common import machine
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.demo.server import build_demo_server
from mcpcache.etag import answer_digest
from mcpcache.protocol import DeltaBlock, conditional_request_meta, parse_cache_block
from mcpcache.server.history import version_of

MB = 1_000_000
NOTEBOOK = "nb.ipynb"
CELL = 40


# The server processes --------------------------------------------------------------------------------


def serve(directory: str, validator: str, history_bytes: str) -> None:
    """`--serve`: the demo server over stdio, as configured."""
    server = build_demo_server(directory, validator=validator == "1", delta_history_bytes=int(history_bytes))
    server.run(transport="stdio", show_banner=False)


def _children() -> set[int]:
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            found.update(int(pid) for pid in (task / "children").read_text().split())
    return found


def cpu_ns(pid: int) -> int:
    """Nanoseconds the process has run on a CPU, all its threads (Linux schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


@dataclass
class Server:
    name: str
    client: mcp.Client
    pid: int
    tag: str = ""
    toggle: int = 0
    source: str = ""

    async def call(
        self, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> tuple[mt.CallToolResult, float]:
        """The result and the server's CPU for it, in milliseconds."""
        before = cpu_ns(self.pid)
        result = await self.client.call_tool(tool, arguments, meta=meta)  # type: ignore[arg-type]
        return result, (cpu_ns(self.pid) - before) / 1e6

    async def read(self) -> tuple[mt.CallToolResult, float]:
        return await self.call("read_notebook", {"path": NOTEBOOK})

    async def edit(self) -> None:
        self.toggle += 1
        source = f"{self.source}\nprint('edit {self.toggle}')"
        await self.client.call_tool("edit_cell", {"path": NOTEBOOK, "index": CELL, "source": source})


@contextlib.asynccontextmanager
async def start(
    stack: AsyncExitStack, root: Path, name: str, *, validator: bool, history_bytes: int
) -> AsyncIterator[Server]:
    directory = root / name
    directory.mkdir()
    (directory / NOTEBOOK).write_bytes((root / NOTEBOOK).read_bytes())
    before = _children()
    params = mcp.StdioServerParameters(
        command=sys.executable,
        args=[__file__, "--serve", str(directory), "1" if validator else "0", str(history_bytes)],
    )
    errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: ASYNC230, SIM115  # the server's banner
    client = await stack.enter_async_context(mcp.Client(stdio_client(params, errlog=errlog)))
    (pid,) = _children() - before
    server = Server(name, client, pid)
    first, _ = await server.read()
    server.source = first.structured_content["cells"][CELL]["source"]
    server.tag = _tag(first)
    yield server


def _tag(result: mt.CallToolResult) -> str:
    block = parse_cache_block(result.meta)
    assert block is not None
    assert block.etag is not None
    return block.etag


def wire_bytes(result: mt.CallToolResult) -> int:
    return len(orjson.dumps(result.model_dump(by_alias=True, mode="json", exclude_none=True)))


# 1. Delta replies ------------------------------------------------------------------------------------------


@dataclass
class DeltaRow:
    config: str
    full_bytes: int
    delta_reply_bytes: int
    ops_bytes: int
    full_ms: float
    delta_ms: float
    ratio: float
    low: float
    high: float
    ratios: list[float] = field(default_factory=list)


async def delta_rows(servers: list[Server], rounds: int, calls: int) -> list[DeltaRow]:
    per: dict[str, dict[str, list[float]]] = {s.name: {"full": [], "delta": []} for s in servers}
    sizes: dict[str, tuple[int, int, int]] = {}
    for _ in range(rounds):
        for server in servers:
            fulls, deltas = [], []
            for _ in range(calls):
                await server.edit()
                meta = conditional_request_meta(server.tag, accept_delta=[delta.FORMAT])
                reply, spent = await server.call("read_notebook", {"path": NOTEBOOK}, meta)
                found = parse_cache_block(reply.meta)
                assert found is not None
                assert isinstance(found.delta, DeltaBlock), "expected a delta reply"
                deltas.append(spent)
                full, spent_full = await server.read()
                fulls.append(spent_full)
                server.tag = _tag(full)
                sizes[server.name] = (wire_bytes(full), wire_bytes(reply), len(orjson.dumps(found.delta.ops)))
            per[server.name]["full"].append(statistics.median(fulls))
            per[server.name]["delta"].append(statistics.median(deltas))
    rows = []
    for server in servers:
        full_ms, delta_ms = per[server.name]["full"], per[server.name]["delta"]
        ratios = [d / f for d, f in zip(delta_ms, full_ms, strict=True)]
        full_bytes, reply_bytes, ops_bytes = sizes[server.name]
        rows.append(
            DeltaRow(
                server.name, full_bytes, reply_bytes, ops_bytes,
                statistics.median(full_ms), statistics.median(delta_ms),
                statistics.median(ratios), min(ratios), max(ratios), ratios,
            )
        )  # fmt: skip
    return rows


# 2. Full reads with and without the history -------------------------------------------------------------


@dataclass
class OverheadRow:
    config: str
    on_ms: float
    off_ms: float
    ratio: float
    low: float
    high: float
    ratios: list[float] = field(default_factory=list)
    best: float | None = None
    """The fastest call with the history on ÷ the fastest with it off."""


async def overhead_rows(pairs: list[tuple[str, Server, Server]], rounds: int, calls: int) -> list[OverheadRow]:
    rows = []
    per: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name, _, _ in pairs}
    for n in range(rounds):
        for name, on, off in pairs:
            order = (on, off) if n % 2 == 0 else (off, on)  # neither always goes first
            medians: dict[str, float] = {}
            for server in order:
                spent = [(await server.read())[1] for _ in range(calls)]
                medians[server.name] = statistics.median(spent)
            per[name][0].append(medians[on.name])
            per[name][1].append(medians[off.name])
    for name, _, _ in pairs:
        on_ms, off_ms = per[name]
        ratios = [a / b for a, b in zip(on_ms, off_ms, strict=True)]
        rows.append(
            OverheadRow(
                name, statistics.median(on_ms), statistics.median(off_ms),
                statistics.median(ratios), min(ratios), max(ratios), ratios,
            )
        )  # fmt: skip
    return rows


class _CpuMeter(Middleware):
    """Outermost middleware: the process CPU each tools/call spends inside the server's chain."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    async def on_call_tool(self, context: Any, call_next: Any) -> Any:
        if context.message.name != "read_notebook":
            return await call_next(context)
        begin = time.process_time()
        try:
            return await call_next(context)
        finally:
            self.samples.append((time.process_time() - begin) * 1e3)


async def overhead_in_process(root: Path, pairs: int) -> list[OverheadRow]:
    """Full reads in process, one with the history on then one with it off (or the other way round), so
    the two calls of a pair ran under the same load; the ratio is per pair. Reported as the median (p10..
    p90) of the pairs' ratios, and beside it the ratio of the fastest call of each (interference only
    ever adds time, so the fastest calls are the least disturbed). Two cases: the same notebook read
    again (what a stock client does; the history already holds that answer), and a notebook edited
    before every read (each answer is new, and recorded)."""
    rows = []
    for validator, edited in ((False, False), (True, False), (False, True), (True, True)):
        meters: dict[str, _CpuMeter] = {}
        clients: dict[str, fastmcp.Client[Any]] = {}
        async with AsyncExitStack() as stack:
            for state, history_bytes in (("on", 64 << 20), ("off", 0)):
                directory = root / f"in-process-{validator}-{edited}-{state}"
                directory.mkdir()
                (directory / NOTEBOOK).write_bytes((root / NOTEBOOK).read_bytes())
                server = build_demo_server(directory, validator=validator, delta_history_bytes=history_bytes)
                meters[state] = _CpuMeter()
                server.middleware.insert(0, meters[state])
                clients[state] = await stack.enter_async_context(fastmcp.Client(server))
                for _ in range(3):  # warm: imports, caches, and a full history for "on"
                    await clients[state].call_tool_mcp("read_notebook", {"path": NOTEBOOK})
            for meter in meters.values():
                meter.samples.clear()
            for n in range(pairs):
                for state in ("on", "off") if n % 2 == 0 else ("off", "on"):
                    if edited:
                        edit = {"path": NOTEBOOK, "index": CELL, "source": f"print({n})"}
                        await clients[state].call_tool_mcp("edit_cell", edit)
                    await clients[state].call_tool_mcp("read_notebook", {"path": NOTEBOOK})
        on_ms, off_ms = meters["on"].samples, meters["off"].samples
        ratios = sorted(a / b for a, b in zip(on_ms, off_ms, strict=True))
        rows.append(
            OverheadRow(
                f"{'validator' if validator else 'raw-value tag'}, in process, "
                f"{'edited before each read' if edited else 'the same answer again'} ({pairs} pairs)",
                statistics.median(on_ms), statistics.median(off_ms),
                statistics.median(ratios), ratios[len(ratios) // 10], ratios[len(ratios) * 9 // 10], ratios,
                best=min(on_ms) / min(off_ms),
            )
        )  # fmt: skip
    return rows


# 3. Where a delta's CPU goes ----------------------------------------------------------------------------


def best_ms(fn: Callable[[], object], runs: int = 7) -> float:
    samples = []
    gc.disable()
    try:
        for _ in range(runs):
            begin = time.process_time()
            fn()
            samples.append(time.process_time() - begin)
    finally:
        gc.enable()
    return min(samples) * 1e3


async def parts(root: Path) -> dict[str, float]:
    directory = root / "parts"
    directory.mkdir()
    (directory / NOTEBOOK).write_bytes((root / NOTEBOOK).read_bytes())
    server = build_demo_server(directory, revalidation=False)
    old = await server.call_tool("read_notebook", {"path": NOTEBOOK})
    source = old.structured_content["cells"][CELL]["source"]  # type: ignore[index]
    await server.call_tool("edit_cell", {"path": NOTEBOOK, "index": CELL, "source": source + "\nprint(1)"})
    new = await server.call_tool("read_notebook", {"path": NOTEBOOK})
    base = version_of(old.content, old.structured_content, old.meta)
    target = version_of(new.content, new.structured_content, new.meta)
    assert base is not None
    assert target is not None
    base_document = base.document()
    new_document = delta.answer_document(new.content, new.structured_content, new.meta)
    return {
        "record the new answer (version_of)": best_ms(
            lambda: version_of(new.content, new.structured_content, new.meta)
        ),
        "the base's document from the history": best_ms(base.document),
        "diff": best_ms(lambda: delta.diff(base_document, new_document, max_bytes=target.json_size // 2)),
        "digest of the new answer": best_ms(lambda: answer_digest(new.content, new.structured_content, new.meta)),
    }


# Report ------------------------------------------------------------------------------------------------------


def render(
    notebook_bytes: int,
    deltas: list[DeltaRow],
    overhead: list[OverheadRow],
    split: dict[str, float],
    rounds: int,
    calls: int,
) -> str:
    out = [
        f"### Delta replies, {notebook_bytes / MB:.1f} MB notebook, one-cell edit; demo server over stdio, "
        f"server process CPU ({rounds} rounds, median of {calls} calls per round; ratio: median (min..max))",
        "",
        "| tags | full answer, bytes | delta reply, bytes (ops) | full read, ms | delta reply, ms "
        "| delta ÷ full read |",
        "|---|---|---|---|---|---|",
    ]
    for r in deltas:
        out.append(
            f"| {r.config} | {r.full_bytes:,} | {r.delta_reply_bytes:,} ({r.ops_bytes:,}) | {r.full_ms:.1f} "
            f"| {r.delta_ms:.1f} | **{r.ratio:.2f}×** ({r.low:.2f}..{r.high:.2f}) |"
        )
    out += [
        "",
        "### Full reads with the history on (64 MiB) and off, same calls, interleaved "
        f"(over stdio: {rounds} rounds of {calls} calls, median (min..max) of per-round ratios; in process: "
        "pairs of calls, median (p10..p90) of per-pair ratios)",
        "",
        "| tags | on, ms | off, ms | on ÷ off | fastest on ÷ fastest off |",
        "|---|---|---|---|---|",
    ]
    for o in overhead:
        best = f"{o.best:.3f}×" if o.best is not None else ""
        out.append(
            f"| {o.config} | {o.on_ms:.1f} | {o.off_ms:.1f} | **{o.ratio:.3f}×** ({o.low:.3f}..{o.high:.3f}) | {best} |"
        )
    out += ["", "### Where a delta's CPU goes (in process, best of 7)", "", "| step | ms |", "|---|---|"]
    out += [f"| {name} | {ms:.1f} |" for name, ms in split.items()]
    return "\n".join(out)


async def main(args: argparse.Namespace) -> None:
    rounds, calls = (3, 2) if args.quick else (args.rounds, args.calls)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate_notebook_of_size(root / NOTEBOOK, 5 * MB, seed=7)
        notebook_bytes = (root / NOTEBOOK).stat().st_size
        split = await parts(root)
        in_process = await overhead_in_process(root, rounds * calls * 4)
        async with AsyncExitStack() as stack:
            raw = await stack.enter_async_context(
                start(stack, root, "raw-value tag", validator=False, history_bytes=64 << 20)
            )
            valid = await stack.enter_async_context(
                start(stack, root, "validator", validator=True, history_bytes=64 << 20)
            )
            raw_off = await stack.enter_async_context(
                start(stack, root, "raw-value tag, off", validator=False, history_bytes=0)
            )
            valid_off = await stack.enter_async_context(
                start(stack, root, "validator, off", validator=True, history_bytes=0)
            )
            deltas = await delta_rows([raw, valid], rounds, calls)
            overhead = await overhead_rows(
                [("raw-value tag, server process", raw, raw_off), ("validator, server process", valid, valid_off)],
                rounds,
                calls,
            )
        overhead += in_process
    print(render(notebook_bytes, deltas, overhead, split, rounds, calls))
    print()
    print(f"Machine: {machine()}")
    if args.json:
        found = {
            "machine": machine(),
            "notebook_bytes": notebook_bytes,
            "deltas": [asdict(r) for r in deltas],
            "overhead": [asdict(o) for o in overhead],
            "parts_ms": split,
        }
        await anyio.Path(args.json).write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(*sys.argv[2:5])
        raise SystemExit(0)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    anyio.run(main, parser.parse_args())
