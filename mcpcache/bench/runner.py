"""`mcpcache bench`: every configuration on the same notebooks, side by side, with a progress bar.

The runner generates the notebooks (deterministic, seeded), gives each configuration its own copies (the
scenario edits them), runs one worker process per configuration (`mcpcache.bench.worker`), and writes
`bench.json` (every raw figure, the machine and its software as `mcpcache.bench.common.machine` describes them,
and the arguments) and `bench.png`.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mcpcache.bench import report
from mcpcache.bench.common import machine
from mcpcache.bench.configs import Config, select
from mcpcache.bench.worker import WARM_UP_NOTEBOOK, RunSpec

SIZES: dict[str, int] = {"100KB": 100_000, "1MB": 1_000_000, "5MB": 5_000_000, "20MB": 20_000_000}
DEFAULT_SIZES = ("100KB", "1MB", "5MB", "20MB")
QUICK_SIZES = ("100KB", "1MB")
SEED = 42


@dataclass(frozen=True)
class BenchArgs:
    out: Path
    sizes: tuple[str, ...]
    reads: int
    edit_every: int
    transport: str
    configs: str | None
    quick: bool


def parse_size(label: str) -> int:
    """'5MB' -> 5_000_000 (decimal units, as the table prints them)."""
    text = label.strip().upper()
    if text in SIZES:
        return SIZES[text]
    for unit, factor in (("KB", 1_000), ("MB", 1_000_000), ("GB", 1_000_000_000)):
        if text.endswith(unit):
            number = float(text[: -len(unit)])
            if number <= 0:
                break
            return int(number * factor)
    raise ValueError(f"cannot read {label!r} as a size (e.g. 100KB, 1MB, 5MB)")


def _notebooks(out: Path, sizes: tuple[str, ...], console: Console) -> dict[str, Path]:
    from mcpcache.demo.notebooks import generate_notebook, generate_notebook_of_size

    folder = out / "notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for label in sizes:
        path = folder / f"notebook-{label}.ipynb"
        marker = path.with_suffix(".seed")
        wanted = f"{parse_size(label)}:{SEED}"
        if not path.exists() or not marker.exists() or marker.read_text() != wanted:
            console.print(f"generating the {label} notebook")
            generate_notebook_of_size(path, parse_size(label), seed=SEED)
            marker.write_text(wanted)
        paths[label] = path
    warm = folder / WARM_UP_NOTEBOOK
    if not warm.exists():
        generate_notebook(warm, 6, seed=SEED)
    paths[WARM_UP_NOTEBOOK] = warm
    return paths


def _run_config(
    config: Config, args: BenchArgs, notebooks: dict[str, Path], progress: Progress, task: Any
) -> dict[str, Any]:
    work = args.out / "runs" / config.key
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    names = []
    for label in args.sizes:
        shutil.copyfile(notebooks[label], work / notebooks[label].name)
        names.append(notebooks[label].name)
    shutil.copyfile(notebooks[WARM_UP_NOTEBOOK], work / WARM_UP_NOTEBOOK)
    spec = RunSpec(
        config=config.key,
        directory=str(work),
        notebooks=names,
        reads=args.reads,
        edit_every=args.edit_every,
        transport=args.transport,
        output=str(work / "result.json"),
    )
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(asdict(spec)))
    command = [sys.executable, "-m", "mcpcache.bench.worker", str(spec_path), "--progress"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("progress"):
                progress.advance(task)
        stderr = process.stderr.read() if process.stderr else ""
        code = process.wait()
    if code != 0:
        raise RuntimeError(f"the {config.key} run failed (exit {code}):\n{stderr[-4000:]}")
    result: dict[str, Any] = json.loads(Path(spec.output).read_text())
    for name in names:
        (work / name).unlink(missing_ok=True)  # the copies can be large; the logs stay for inspection
    return result


def run_bench(args: BenchArgs, console: Console) -> dict[str, Any]:
    configs = select(args.configs)
    args.out.mkdir(parents=True, exist_ok=True)
    notebooks = _notebooks(args.out, args.sizes, console)
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    steps = len(configs) * len(args.sizes) * args.reads
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("reads", total=steps)
        for index, config in enumerate(configs):
            progress.update(task, description=f"[{index + 1}/{len(configs)}] {config.label}")
            config_started = time.monotonic()
            results.append(_run_config(config, args, notebooks, progress, task))
            results[-1]["seconds"] = time.monotonic() - config_started
        progress.update(task, description="by reference, tag cost and tokens")
        extras_started = time.monotonic()
        byref = anyio.run(_byref, 5 if args.quick else 15)
        answers = _answer_costs(notebooks, args.sizes)
        extras_seconds = time.monotonic() - extras_started
    document: dict[str, Any] = {
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "args": {**asdict(args), "out": str(args.out)},
        "configs": [asdict(c) for c in configs],
        "seconds": time.monotonic() - started,
        "extras_seconds": extras_seconds,
        "answers": answers,
        "by_reference": byref,
        "raw": results,
    }
    document = report.resummarize(document)
    (args.out / "bench.json").write_text(json.dumps(document, indent=1))
    report.plot(document["summaries"], args.out / "bench.png")
    return document


async def _byref(runs: int) -> dict[str, Any]:
    from mcpcache.bench.byref import run

    return await run(runs=runs)


def _answer_costs(notebooks: dict[str, Path], sizes: tuple[str, ...]) -> list[dict[str, Any]]:
    """On each notebook's real answer: the tag's CPU alone (mcpcache against the SHA-256 form), the tokens."""
    from mcpcache.bench.tagcost import measure

    return [measure(label, notebooks[label]) for label in sizes]
