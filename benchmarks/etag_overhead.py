"""What a weak ETag costs the server, and what a not-modified reply saves on the wire.

Two questions, answered on realistic answers (the demo server's read_notebook on generated notebooks):

1. Stamping: how long mcpcache's `content_tag` takes on a result of 10 KB .. 20 MB, next to
   (a) the SHA-256 tag of the Datalayer Jupyter MCP server (sha256 of `json.dumps(obj, sort_keys=True,
   separators=(",", ":"))`, first 32 hex digits) over the same document, and
   (b) the SDK's own serialisation of the same result (`CallToolResult.model_dump_json(by_alias=True,
   exclude_none=True)`), which every reply pays anyway.
2. Wire: the bytes of a full reply and of a not-modified reply for a 5 MB notebook, counted at the
   client's transport (mcpcache.wire_count) over stdio against `python -m mcpcache demo-server`.
3. Server CPU per call (in process, FastMCP, a tool returning the parsed 5 MB notebook as a dict, and
   the demo server's own read_notebook, which returns a TypedDict): a conditional call whose tag
   matches, on the raw-value path (`install()`) and on the content path (`install(raw_tags=False)`); a
   full read stamped and not (no mcpcache), on the generated notebook, an ASCII-only copy and a copy in
   mostly non-ASCII letters. The CPU is counted by a middleware placed outside everything else
   (middleware, body, FastMCP's conversion, the tag), with `time.process_time`; rounds interleave the
   configurations; ratios are given as median (p10..p90) over the rounds.

Run:  python benchmarks/etag_overhead.py            (about two minutes)
      python benchmarks/etag_overhead.py --server-cpu --rounds 30   (the server CPU section only)
      python benchmarks/etag_overhead.py --quick    (fewer runs; a smoke test, not for the docs)
      python benchmarks/etag_overhead.py --json out.json
It prints Markdown tables; docs/benchmarks.md holds a copy of one run and how to read it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO, cast

import anyio
import mcp
import mcp_types as mt
import orjson
import xxhash
from fastmcp import FastMCP
from fastmcp.server.middleware import Middleware
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client

from mcpcache import etag
from mcpcache.bench.common import machine
from mcpcache.canonical import _reject_non_finite, canonical_json
from mcpcache.demo.notebooks import generate_notebook_of_size
from mcpcache.demo.peers import datalayer_tag
from mcpcache.demo.server import NotebookFolder, build_demo_server
from mcpcache.protocol import META_KEY, conditional_request_meta
from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy
from mcpcache.wire_count import CountingTransport, WireLog

MB = 1_000_000
SIZES = (("10 KB", 10_000), ("1 MB", MB), ("5 MB", 5 * MB), ("10 MB", 10 * MB), ("20 MB", 20 * MB))
RUNS = {10_000: 500, MB: 100, 5 * MB: 30, 10 * MB: 20, 20 * MB: 10}
WARMUP = 3
WIRE_NOTEBOOK_BYTES = 5 * MB
WIRE_REPEATS = 5


# --- stamping -----------------------------------------------------------------------------------------


@dataclass
class Timing:
    best_ms: float
    median_ms: float
    runs: int


def measure(fn: Callable[[], object], runs: int) -> Timing:
    for _ in range(WARMUP):
        fn()
    samples = []
    # As timeit does: a collection landing in one sample says nothing about the code being timed.
    gc.disable()
    try:
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return Timing(min(samples) * 1e3, statistics.median(samples) * 1e3, runs)


@dataclass
class Sample:
    label: str
    notebook_bytes: int
    cells: int
    result_bytes: int
    canonical_bytes: int
    content: list[mt.ContentBlock]
    structured: dict[str, Any]
    path: Path


async def read_notebook_result(directory: Path, name: str) -> tuple[list[mt.ContentBlock], dict[str, Any]]:
    """What the mcpcache middleware sees for read_notebook: FastMCP's ToolResult, before any stamping."""
    server = build_demo_server(directory, revalidation=False)
    result = await server.call_tool("read_notebook", {"path": name})
    assert result.structured_content is not None
    return list(result.content), result.structured_content


def wire_json(content: list[mt.ContentBlock], structured: dict[str, Any]) -> str:
    return mt.CallToolResult(content=content, structured_content=structured).model_dump_json(
        by_alias=True, exclude_none=True
    )


async def build_samples(directory: Path, sizes: tuple[tuple[str, int], ...]) -> list[Sample]:
    """Results whose SDK serialisation is close to each size: the notebook is sized, measured, resized."""
    samples = []
    for label, target in sizes:
        name = f"result-{target}.ipynb"
        notebook_target = target // 2  # an answer goes out twice: text content and structuredContent
        for _ in range(2):
            path = generate_notebook_of_size(directory / name, notebook_target, seed=42)
            content, structured = await read_notebook_result(directory, name)
            result_bytes = len(wire_json(content, structured).encode("utf-8"))
            notebook_target = max(1_000, round(notebook_target * target / result_bytes))
        document = {"content": etag.wire_content(content), "structuredContent": structured}
        canonical = canonical_json(document)
        samples.append(
            Sample(
                label=label,
                notebook_bytes=path.stat().st_size,
                cells=int(structured["cell_count"]),
                result_bytes=result_bytes,
                canonical_bytes=len(canonical),
                content=content,
                structured=structured,
                path=path,
            )
        )
    return samples


@dataclass
class StampRow:
    label: str
    notebook_bytes: int
    cells: int
    result_bytes: int
    canonical_bytes: int
    runs: int
    mcpcache: Timing
    sha256_form: Timing
    sdk_serialisation: Timing
    validator: Timing
    # Where mcpcache's time goes (best of the same runs each).
    part_canonical_orjson: Timing
    part_nan_walk: Timing
    part_xxh3: Timing


def stamp_row(sample: Sample, runs: int) -> StampRow:
    content, structured = sample.content, sample.structured
    # (a) is given plain dicts, already dumped, so its time is only its serialiser and hash.
    document = {"content": etag.wire_content(content), "structuredContent": structured}
    result = mt.CallToolResult(content=content, structured_content=structured)
    canonical = canonical_json(document)
    pieces = [*document["content"], structured]
    folder = NotebookFolder(sample.path.parent)
    arguments = {"path": sample.path.name}

    def with_validator() -> str:
        version = folder.version(sample.path.name)
        return etag.validator_tag("read_notebook", arguments, version)

    assert datalayer_tag(document) != etag.content_tag(content, structured)
    return StampRow(
        label=sample.label,
        notebook_bytes=sample.notebook_bytes,
        cells=sample.cells,
        result_bytes=sample.result_bytes,
        canonical_bytes=sample.canonical_bytes,
        runs=runs,
        mcpcache=measure(lambda: etag.content_tag(content, structured), runs),
        sha256_form=measure(lambda: datalayer_tag(document), runs),
        sdk_serialisation=measure(lambda: result.model_dump_json(by_alias=True, exclude_none=True), runs),
        validator=measure(with_validator, runs),
        # As content_tag does it: one sorted dump per piece (each content block, the structured content).
        part_canonical_orjson=measure(
            lambda: [orjson.dumps(piece, option=orjson.OPT_SORT_KEYS) for piece in pieces], runs
        ),
        part_nan_walk=measure(lambda: _reject_non_finite(document), runs),
        part_xxh3=measure(lambda: xxhash.xxh3_128_hexdigest(canonical), runs),
    )


# --- wire bytes -----------------------------------------------------------------------------------------


@dataclass
class WireRow:
    configuration: str
    era: str
    request_bytes: int
    full_reply_bytes: int
    conditional_request_bytes: int
    conditional_reply_bytes: int
    not_modified: bool
    full_call_ms: float
    conditional_call_ms: float


async def wire_row(
    directory: Path, name: str, configuration: str, flags: list[str], mode: str, errlog: TextIO
) -> WireRow:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mcpcache", "demo-server", "--dir", str(directory), *flags]
    )
    # Deferred: a message is measured when the log is next read, outside the timed calls, so a call's time
    # does not include serialising its reply (about 10 MB: the notebook as text and as structuredContent) a
    # second time just to count it. Only the latency columns move; the byte columns are the same.
    log = WireLog(deferred=True)
    full_ms: list[float] = []
    conditional_ms: list[float] = []
    transport = CountingTransport(stdio_client(params, errlog=errlog), log)
    async with mcp.Client(transport, mode=mode) as client:
        era = client.session.protocol_version if hasattr(client.session, "protocol_version") else mode
        # Listed first so the schema fetch the SDK does before validating a result is not counted in a call.
        await client.list_tools()
        for _ in range(WIRE_REPEATS):
            full_mark = log.mark()
            start = time.perf_counter()
            full = await client.call_tool("read_notebook", {"path": name})
            full_ms.append(time.perf_counter() - start)
        tag = ((full.meta or {}).get(META_KEY) or {}).get("etag") or 'W/"00000000000000000000000000000000"'
        for _ in range(WIRE_REPEATS):
            conditional_mark = log.mark()
            start = time.perf_counter()
            meta = cast(mt.RequestParamsMeta, conditional_request_meta(tag))
            again = await client.call_tool("read_notebook", {"path": name}, meta=meta)
            conditional_ms.append(time.perf_counter() - start)
    request, reply = log.exchange("tools/call", since=full_mark)
    conditional_request, conditional_reply = log.exchange("tools/call", since=conditional_mark)
    block = (again.meta or {}).get(META_KEY) or {}
    return WireRow(
        configuration=configuration,
        era=str(era),
        request_bytes=request.nbytes,
        full_reply_bytes=reply.nbytes,
        conditional_request_bytes=conditional_request.nbytes,
        conditional_reply_bytes=conditional_reply.nbytes,
        not_modified=block.get("notModified") is True,
        full_call_ms=statistics.median(full_ms) * 1e3,
        conditional_call_ms=statistics.median(conditional_ms) * 1e3,
    )


async def wire_rows(directory: Path, errlog: TextIO) -> tuple[int, list[WireRow]]:
    name = "wire-5mb.ipynb"
    path = generate_notebook_of_size(directory / name, WIRE_NOTEBOOK_BYTES, seed=5)
    configurations: tuple[tuple[str, list[str]], ...] = (
        ("mcpcache, tag from the answer", []),
        ("mcpcache, validator", ["--validator"]),
        ("plain FastMCP (no mcpcache)", ["--no-revalidation"]),
    )
    rows = []
    for mode in ("auto", "legacy"):
        for configuration, flags in configurations:
            rows.append(await wire_row(directory, name, configuration, flags, mode, errlog))
    return path.stat().st_size, rows


# --- server CPU per call ------------------------------------------------------------------------------

SERVER_ROUNDS = 12
SERVER_CALLS = 5


class _CpuMeter(Middleware):
    """Outermost middleware: the process CPU each tools/call spends inside the server's chain."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    async def on_call_tool(self, context: Any, call_next: Any) -> Any:
        start = time.process_time()
        try:
            return await call_next(context)
        finally:
            self.samples.append(time.process_time() - start)


def _cpu_server(path: Path, mode: str) -> tuple[FastMCP, _CpuMeter]:
    server = FastMCP(f"cpu-{mode}")

    @server.tool
    def read_notebook(name: str) -> dict[str, Any]:
        return cast(dict[str, Any], orjson.loads(path.read_bytes()))

    if not mode.startswith("plain"):
        install(server, {"read_notebook": CachePolicy()}, raw_tags=mode != "content")
    meter = _CpuMeter()
    server.middleware.insert(0, meter)
    return server, meter


def _demo_cpu_server(directory: Path, stamped: bool) -> tuple[FastMCP, _CpuMeter]:
    """The demo server (`mcpcache bench`'s): its read_notebook returns a TypedDict."""
    server = build_demo_server(directory, revalidation=stamped)
    meter = _CpuMeter()
    server.middleware.insert(0, meter)
    return server, meter


# Letters of the notebook's prose and outputs swapped for 2-, 3- and 4-byte characters (Greek, accented
# Latin, CJK, an emoji): every text cell then holds a few hundred non-ASCII characters.
_NON_ASCII = str.maketrans({"a": "\u03b1", "e": "\u00e9", "o": "\u00f6", "i": "\u65e5", "u": "\u00fc", "t": "\u03c4"})
_NON_ASCII_NOTE = " \U0001f4ca"


def _non_ascii(value: Any) -> Any:
    if isinstance(value, str):
        return value.translate(_NON_ASCII)
    if isinstance(value, list):
        return [_non_ascii(item) for item in value]
    return value


def non_ascii_copy(path: Path, out: Path) -> Path:
    """`path`'s notebook with its sources and text outputs in mostly non-ASCII letters (images kept)."""
    notebook = orjson.loads(path.read_bytes())
    for cell in notebook["cells"]:
        cell["source"] = [*_non_ascii(cell["source"]), _NON_ASCII_NOTE]
        for output in cell.get("outputs", []):
            if "text" in output:
                output["text"] = _non_ascii(output["text"])
            data = output.get("data", {})
            for key in ("text/plain", "text/html"):
                if key in data:
                    data[key] = _non_ascii(data[key])
    out.write_bytes(orjson.dumps(notebook))
    return out


@dataclass
class ServerCpuRow:
    measure: str
    median_ratio: float
    low: float
    high: float
    numerator_ms: float
    denominator_ms: float
    difference_ms: float = 0.0
    """The median over rounds of numerator less denominator (what stamping adds, for the stamped rows)."""
    difference_low_ms: float = 0.0
    difference_high_ms: float = 0.0


# (mode, notebook, tool): the dict-returning tool on the generated notebook, an ASCII-only copy and a copy
# in mostly non-ASCII letters; the demo server's own read_notebook (a TypedDict) on the first and last.
_CPU_MODES = (
    ("raw", "nb", "dict"),
    ("content", "nb", "dict"),
    ("plain", "nb", "dict"),
    ("raw-ascii", "ascii", "dict"),
    ("plain-ascii", "ascii", "dict"),
    ("raw-intl", "intl", "dict"),
    ("plain-intl", "intl", "dict"),
    ("demo", "nb", "demo"),
    ("demo-plain", "nb", "demo"),
    ("demo-intl", "intl", "demo"),
    ("demo-plain-intl", "intl", "demo"),
)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def server_cpu_rows(directory: Path, rounds: int) -> tuple[dict[str, int], list[ServerCpuRow]]:
    from fastmcp import Client

    cpu = directory / "cpu"
    cpu.mkdir(exist_ok=True)
    path = generate_notebook_of_size(cpu / "nb.ipynb", 5 * MB, seed=7)
    # The generated notebook has a few non-ASCII characters (×), as real ones do. A full read tags the
    # JSON FastMCP wrote (its text when ASCII, else its object written by orjson), so three kinds of text
    # are measured: as generated, ASCII only, and mostly non-ASCII.
    notebooks = {
        "nb": path,
        "ascii": cpu / "ascii.ipynb",
        "intl": non_ascii_copy(path, cpu / "intl.ipynb"),
    }
    notebooks["ascii"].write_text(path.read_text(encoding="utf-8").replace("×", "x"), encoding="utf-8")
    servers: dict[str, tuple[FastMCP, _CpuMeter]] = {}
    arguments: dict[str, dict[str, str]] = {}
    for mode, notebook, tool in _CPU_MODES:
        if tool == "demo":
            servers[mode] = _demo_cpu_server(cpu, stamped="plain" not in mode)
            arguments[mode] = {"path": notebooks[notebook].name}
        else:
            servers[mode] = _cpu_server(notebooks[notebook], mode.split("-")[0])
            arguments[mode] = {"name": "x"}
    modes = [mode for mode, _, _ in _CPU_MODES]
    stamped = [mode for mode in modes if "plain" not in mode]
    # Each row's two sides are called alternately, call by call, so that both see the same load on a
    # machine shared with other work; a side is "MODE/full" (no tag) or "MODE/match" (the current tag).
    rows = (
        ("full read: stamped (raw tag) ÷ not stamped", "raw/full", "plain/full"),
        ("full read: stamped (content tag) ÷ not stamped", "content/full", "plain/full"),
        ("ASCII-only notebook, full read: stamped (raw tag) ÷ not stamped", "raw-ascii/full", "plain-ascii/full"),
        ("mostly non-ASCII notebook, full read: stamped (raw tag) ÷ not stamped", "raw-intl/full", "plain-intl/full"),
        ("demo server (TypedDict), full read: stamped ÷ not stamped", "demo/full", "demo-plain/full"),
        ("demo server, mostly non-ASCII notebook: stamped ÷ not stamped", "demo-intl/full", "demo-plain-intl/full"),
        ("full read ÷ matching conditional call, raw path", "plain/full", "raw/match"),
        ("full read ÷ matching conditional call, content path", "plain/full", "content/match"),
        ("matching conditional call: content path ÷ raw path", "content/match", "raw/match"),
    )
    per_round: dict[tuple[str, str], list[float]] = {(label, side): [] for label, *sides in rows for side in sides}
    async with AsyncExitStack() as stack:
        clients = {mode: await stack.enter_async_context(Client(servers[mode][0])) for mode in modes}
        tags: dict[str, str] = {}
        for mode in modes:
            first = await clients[mode].call_tool("read_notebook", arguments[mode])
            if mode in stamped:
                tags[mode] = (first.meta or {})[META_KEY]["etag"]
        assert tags["raw"] != tags["content"]

        async def call(side: str) -> float:
            mode, kind = side.split("/")
            meter = servers[mode][1]
            meter.samples.clear()
            meta = conditional_request_meta(tags[mode]) if kind == "match" else None
            result = await clients[mode].call_tool("read_notebook", arguments[mode], meta=meta)
            assert ((result.meta or {}).get(META_KEY) or {}).get("notModified") is (True if meta else None)
            return meter.samples[-1]

        for _ in range(rounds):
            for label, top, bottom in rows:
                samples: dict[str, list[float]] = {top: [], bottom: []}
                for _ in range(SERVER_CALLS):
                    for side in (top, bottom):
                        samples[side].append(await call(side))
                for side in (top, bottom):
                    per_round[(label, side)].append(statistics.median(samples[side]))

    def row(label: str, top: str, bottom: str) -> ServerCpuRow:
        tops, bottoms = per_round[(label, top)], per_round[(label, bottom)]
        ratios = [a / b for a, b in zip(tops, bottoms, strict=True)]
        differences = [(a - b) * 1e3 for a, b in zip(tops, bottoms, strict=True)]
        return ServerCpuRow(
            label,
            statistics.median(ratios),
            _percentile(ratios, 0.1),
            _percentile(ratios, 0.9),
            statistics.median(tops) * 1e3,
            statistics.median(bottoms) * 1e3,
            statistics.median(differences),
            _percentile(differences, 0.1),
            _percentile(differences, 0.9),
        )

    sizes = {name: notebook.stat().st_size for name, notebook in notebooks.items()}
    return sizes, [row(*spec) for spec in rows]


def render_server_cpu(notebooks: dict[str, int], rows: list[ServerCpuRow]) -> str:
    sizes = ", ".join(f"{name} {_bytes(size)}" for name, size in notebooks.items())
    out = [
        "",
        f"### Server CPU per call, notebooks {sizes}, FastMCP in process "
        f"(median of {SERVER_CALLS} calls per round; ratio: median (p10..p90) over rounds)",
        "",
        "| measure | ratio | numerator, ms | denominator, ms | difference, ms |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.measure} | **{r.median_ratio:.2f}×** ({r.low:.2f}..{r.high:.2f}) "
            f"| {r.numerator_ms:.1f} | {r.denominator_ms:.1f} "
            f"| {r.difference_ms:+.1f} ({r.difference_low_ms:+.1f}..{r.difference_high_ms:+.1f}) |"
        )
    return "\n".join(out)


# --- report ---------------------------------------------------------------------------------------------


def _bytes(n: int) -> str:
    return f"{n / MB:.2f} MB" if n >= MB else f"{n / 1000:.1f} KB" if n >= 10_000 else f"{n:,} B"


def render(info: dict[str, str], stamps: list[StampRow], wire_notebook: int, wires: list[WireRow]) -> str:
    out = ["### Machine", ""]
    out += [f"- {key}: {value}" for key, value in info.items()]
    out += [
        "",
        "### Stamping a tag: ratios (best of N)",
        "",
        "| result | SHA-256 form ÷ mcpcache | mcpcache ÷ SDK serialisation | validator ÷ SDK serialisation |",
        "|---|---|---|---|",
    ]
    for row in stamps:
        out.append(
            f"| {row.label} | **{row.sha256_form.best_ms / row.mcpcache.best_ms:.1f}×** "
            f"| **{100 * row.mcpcache.best_ms / row.sdk_serialisation.best_ms:.0f} %** "
            f"| {100 * row.validator.best_ms / row.sdk_serialisation.best_ms:.0f} % |"
        )
    out += [
        "",
        "### Stamping a tag: absolute times, ms (best / median of N)",
        "",
        "| result | SDK bytes | notebook | cells | N | mcpcache `content_tag` | SHA-256 form (a) "
        "| SDK `model_dump_json` (b) | validator (file xxh3 + tag) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in stamps:
        out.append(
            f"| {row.label} | {row.result_bytes:,} | {_bytes(row.notebook_bytes)} | {row.cells} | {row.runs} "
            f"| {row.mcpcache.best_ms:.3f} / {row.mcpcache.median_ms:.3f} "
            f"| {row.sha256_form.best_ms:.3f} / {row.sha256_form.median_ms:.3f} "
            f"| {row.sdk_serialisation.best_ms:.3f} / {row.sdk_serialisation.median_ms:.3f} "
            f"| {row.validator.best_ms:.3f} / {row.validator.median_ms:.3f} |"
        )
    out += [
        "",
        "### Where mcpcache's stamping time goes, ms (best of N, each part timed alone)",
        "",
        "| result | canonical bytes | `content_tag` | orjson sorted dumps of the pieces | NaN walk | xxh3-128 |",
        "|---|---|---|---|---|---|",
    ]
    for row in stamps:
        out.append(
            f"| {row.label} | {row.canonical_bytes:,} | {row.mcpcache.best_ms:.3f} "
            f"| {row.part_canonical_orjson.best_ms:.3f} "
            f"| {row.part_nan_walk.best_ms:.3f} | {row.part_xxh3.best_ms:.3f} |"
        )
    out += [
        "",
        f"### Wire bytes for one read_notebook of a {_bytes(wire_notebook)} notebook (stdio, counted per message)",
        "",
        "| server | protocol | request | full reply | conditional request | reply to it | not-modified? "
        f"| full call, ms | conditional call, ms (median of {WIRE_REPEATS}) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for wire in wires:
        out.append(
            f"| {wire.configuration} | {wire.era} | {wire.request_bytes:,} B | {wire.full_reply_bytes:,} B "
            f"| {wire.conditional_request_bytes:,} B | **{wire.conditional_reply_bytes:,} B** "
            f"| {'yes' if wire.not_modified else 'no'} | {wire.full_call_ms:.1f} | {wire.conditional_call_ms:.1f} |"
        )
    return "\n".join(out)


async def run(quick: bool, server_stderr: TextIO, server_cpu_only: bool = False, rounds: int = 0) -> dict[str, Any]:
    info = machine()
    with tempfile.TemporaryDirectory(prefix="mcpcache-bench-") as tmp:
        directory = Path(tmp)
        print("building results...", file=sys.stderr)
        samples = await build_samples(directory, () if server_cpu_only else SIZES)
        stamps = []
        for sample in samples:
            runs = max(3, RUNS[dict(SIZES)[sample.label]] // (10 if quick else 1))
            print(f"stamping {sample.label} ({runs} runs)...", file=sys.stderr)
            stamps.append(stamp_row(sample, runs))
        print("server CPU per call...", file=sys.stderr)
        cpu_notebook, cpu_rows = await server_cpu_rows(directory, rounds or (3 if quick else SERVER_ROUNDS))
        if server_cpu_only:
            print(render_server_cpu(cpu_notebook, cpu_rows))
            return {
                "machine": info,
                "server_cpu_notebooks": cpu_notebook,
                "server_cpu": [asdict(row) for row in cpu_rows],
            }
        print("wire bytes over stdio...", file=sys.stderr)
        wire_notebook, wires = await wire_rows(directory, server_stderr)
    print(render(info, stamps, wire_notebook, wires))
    print(render_server_cpu(cpu_notebook, cpu_rows))
    return {
        "machine": info,
        "server_cpu": [asdict(row) for row in cpu_rows],
        "stamping": [asdict(row) for row in stamps],
        "wire_notebook_bytes": wire_notebook,
        "wire": [asdict(row) for row in wires],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a tenth of the runs (smoke test)")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    parser.add_argument("--server-cpu", action="store_true", help="only the server CPU per call section")
    parser.add_argument("--rounds", type=int, default=0, help=f"rounds of the server CPU section ({SERVER_ROUNDS})")
    args = parser.parse_args()
    # The servers log their start on stderr; that is not part of the report.
    with open(os.devnull, "w") as server_stderr:
        results = anyio.run(run, args.quick, server_stderr, args.server_cpu, args.rounds)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
