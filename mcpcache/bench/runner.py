"""`mcpcache bench`: every configuration on the same notebooks, interleaved in rounds, with a progress bar.

The runner generates the notebooks (deterministic, seeded), gives each configuration its own copies (the
scenario edits them), and starts one worker process per configuration (`mcpcache.bench.worker`; over
HTTP also its demo server), all kept alive. Then, notebook by notebook, it plays rounds: in each round
every worker makes one read, in an order shuffled anew (seeded), and every E rounds each first makes one
edit. Noise on the machine thus falls on
all configurations alike, and each round gives a ratio against the baseline's read of the same round.

It writes `bench.json` (every raw operation with its round, the machine, the commit, the load, the
arguments) and one PNG per transport, `bench-http.png` / `bench-stdio.png`. A `--quick` run writes
`bench-quick.json` and `bench-quick-http.png` instead, so it never overwrites a real run.
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import multiprocessing.context
import multiprocessing.process
import os
import random
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console

from mcpcache.bench import report
from mcpcache.bench.common import machine
from mcpcache.bench.configs import Config, select
from mcpcache.bench.progress import Reporter, reporter, sigint_deferred, start_fork_server, stop_fork_server
from mcpcache.bench.relay import DEFAULT_LATENCY_MS, Link, parse_link, run_link_relay
from mcpcache.bench.worker import PRELOAD, WARM_UP_NOTEBOOK, RunSpec, run_server, run_worker
from mcpcache.processes import free_port

SIZES: dict[str, int] = {"100KB": 100_000, "1MB": 1_000_000, "5MB": 5_000_000, "20MB": 20_000_000}
ALL_SIZES = ("100KB", "1MB", "5MB", "20MB")
ALL_TRANSPORTS = ("http", "stdio")
SEED = 42
HOPS_SIZE = SIZES["5MB"]


@dataclass(frozen=True)
class Mode:
    """What a run is for, and what it runs unless told otherwise."""

    name: str
    sizes: tuple[str, ...]
    transports: tuple[str, ...]
    reads: int
    edit_every: int
    byref_runs: int
    byref_bytes: int
    hops_rounds: int = 0
    """Rounds of the proxy-and-gateway scenario on the 5 MB notebook (mcpcache.bench.hops); 0: not run."""


MODES: dict[str, Mode] = {
    # The headline: the 5 MB notebook over streamable HTTP, where bandwidth matters (about 2 minutes).
    "default": Mode("default", ("5MB",), ("http",), 40, 4, 15, 10_000_000),
    "full": Mode("full", ALL_SIZES, ALL_TRANSPORTS, 12, 4, 15, 10_000_000, hops_rounds=12),
    # A smoke run: it shows everything works, its figures are not for quoting.
    "quick": Mode("quick", ("100KB",), ("http",), 6, 3, 3, 1_000_000),
}


@dataclass(frozen=True)
class BenchArgs:
    out: Path
    mode: str
    sizes: tuple[str, ...]
    transports: tuple[str, ...]
    reads: int
    edit_every: int
    configs: str | None
    seed: int = SEED
    extras: bool = True
    """The by-reference scenario and the tag's cost alone (a few seconds); the tests leave them out."""
    link: str | None = None
    """A simulated link every HTTP configuration is read through (`mcpcache.bench.relay.parse_link`:
    e.g. "100mbit"), None for plain loopback."""
    latency_ms: float = DEFAULT_LATENCY_MS
    """The simulated link's one-way latency."""


def result_stem(mode: str) -> str:
    """The file name (without suffix) a run of this mode writes: a quick run never takes a real run's."""
    return "bench-quick" if mode == "quick" else "bench"


def parse_size(label: str) -> int:
    """'5MB' -> 5_000_000 (decimal units, as the table prints them)."""
    text = label.strip().upper().replace(" ", "")
    if text in SIZES:
        return SIZES[text]
    for unit, factor in (("KB", 1_000), ("MB", 1_000_000), ("GB", 1_000_000_000)):
        if text.endswith(unit):
            try:
                number = float(text[: -len(unit)])
            except ValueError:
                break
            if number <= 0:
                break
            return int(number * factor)
    raise ValueError(f"cannot read {label!r} as a size (e.g. 100KB, 1MB, 5MB)")


def _notebooks(out: Path, sizes: tuple[str, ...], console: Console) -> dict[str, Path]:
    folder = out / "notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for label in sizes:
        path = folder / f"notebook-{label}.ipynb"
        marker = path.with_suffix(".seed")
        wanted = f"{parse_size(label)}:{SEED}"
        if not path.exists() or not marker.exists() or marker.read_text() != wanted:
            from mcpcache.demo.notebooks import generate_notebook_of_size

            console.print(f"generating the {label} notebook")
            marker.unlink(missing_ok=True)  # an interrupted generation must not pass for a finished one
            generate_notebook_of_size(path, parse_size(label), seed=SEED)
            marker.write_text(wanted)
        paths[label] = path
    warm = folder / WARM_UP_NOTEBOOK
    if not warm.exists():
        from mcpcache.demo.notebooks import generate_notebook

        generate_notebook(warm, 6, seed=SEED)
    paths[WARM_UP_NOTEBOOK] = warm
    return paths


def _context() -> multiprocessing.context.ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    start_fork_server()
    return context


def _stop(*processes: multiprocessing.process.BaseProcess | None, timeout_s: float = 15.0) -> None:
    """End processes this run started, by their PIDs: SIGTERM to all, then SIGKILL to any that lingers."""
    started = [p for p in processes if p is not None and p.pid is not None]
    for process in started:
        process.join(timeout=0)
        if process.exitcode is None:
            process.terminate()
    for signal_next in (True, False):
        deadline = time.monotonic() + timeout_s
        for process in started:
            process.join(max(0.0, deadline - time.monotonic()))
        if signal_next:
            for process in started:
                if process.exitcode is None:
                    process.kill()


class Worker:
    """One configuration's worker process (and, over HTTP, its demo server), spoken to one command at a time."""

    def __init__(
        self,
        context: multiprocessing.context.ForkServerContext,
        config: Config,
        transport: str,
        work: Path,
        link: Link | None = None,
    ):
        self.config = config
        self.work = work
        self.log = work / "worker.log"
        self.server: multiprocessing.process.BaseProcess | None = None
        self.relay: multiprocessing.process.BaseProcess | None = None
        port = 0
        if transport == "http":
            port = free_port()
            server_log = str(work / f"{config.key}.server.log")
            self.server = context.Process(
                target=run_server, args=(config.key, str(work), port, server_log), name=f"server-{config.key}"
            )
            self.server.start()
        connect = port
        if link is not None and transport == "http":
            # The client reaches its server only through the simulated link, a process of its own.
            connect = free_port()
            self.relay = context.Process(
                target=run_link_relay,
                args=(connect, port, link, str(work / "relay.log")),
                name=f"relay-{config.key}",
            )
            self.relay.start()
        spec = RunSpec(
            config=config.key,
            directory=str(work),
            transport=transport,
            port=connect,
            server_pid=(self.server.pid or 0) if self.server is not None else 0,
        )
        (work / "spec.json").write_text(json.dumps(asdict(spec)))
        self.conn, child = context.Pipe()
        self.process = context.Process(target=run_worker, args=(spec, child, str(self.log)), name=config.key)
        self.process.start()
        child.close()

    def _fail(self, what: str) -> RuntimeError:
        tail = self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
        return RuntimeError(f"the {self.config.key} worker {what} (see {self.log}):\n{tail}")

    def receive(self) -> dict[str, Any]:
        try:
            reply: dict[str, Any] = self.conn.recv()
        except (EOFError, OSError):
            self.process.join(5)
            raise self._fail(f"exited ({self.process.exitcode})") from None
        if "error" in reply:
            raise self._fail(f"failed: {reply['error']}")
        return reply

    def call(self, cmd: str, notebook: str = "") -> dict[str, Any]:
        try:
            self.conn.send({"cmd": cmd, "notebook": notebook})
        except (BrokenPipeError, OSError):
            raise self._fail("is gone") from None
        return self.receive()

    def close(self) -> None:
        """Ask the worker to quit, then stop what is left (by PID): the worker, then its HTTP server."""
        try:
            if self.process.is_alive():
                self.conn.send({"cmd": "quit"})
                self.process.join(30)
        except OSError:
            pass
        finally:
            _stop(self.process)
            _stop(self.relay)
            _stop(self.server)
            self.conn.close()


def _run_transport(
    transport: str,
    configs: tuple[Config, ...],
    args: BenchArgs,
    notebooks: dict[str, Path],
    progress: Reporter,
    task: Any,
    rng: random.Random,
    phases: dict[str, float],
) -> list[dict[str, Any]]:
    """Every configuration over one transport: all workers alive, every notebook played in rounds."""
    workers: dict[str, Worker] = {}
    context = _context()
    started = time.monotonic()
    try:
        for config in configs:
            work = args.out / ("runs-quick" if args.mode == "quick" else "runs") / transport / config.key
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            for label in args.sizes:
                shutil.copyfile(notebooks[label], work / notebooks[label].name)
            shutil.copyfile(notebooks[WARM_UP_NOTEBOOK], work / WARM_UP_NOTEBOOK)
            with sigint_deferred():  # raised once the worker is in `workers`, where the cleanup finds it
                link = parse_link(args.link, args.latency_ms) if args.link else None
                workers[config.key] = Worker(context, config, transport, work, link)
        progress.update(task, description=f"{transport}: starting {len(workers)} workers")
        results: dict[str, dict[str, Any]] = {}
        for key, worker in workers.items():  # they start side by side; this only waits for each
            ready = worker.receive()
            results[key] = {
                "config": key,
                "transport": transport,
                "client_rss_at_start_kib": ready["client_rss_at_start_kib"],
                "runs": [],
            }
        phases[f"{transport}_start_s"] = time.monotonic() - started
        started = time.monotonic()
        keys = list(workers)
        for label in args.sizes:
            name = notebooks[label].name
            progress.update(task, description=f"{transport}, {report.size_label(label)}")
            operations: dict[str, list[dict[str, Any]]] = {key: [] for key in keys}
            for key in keys:
                workers[key].call("begin", name)
            for round_index in range(args.reads):
                if args.edit_every and round_index and round_index % args.edit_every == 0:
                    for key in rng.sample(keys, len(keys)):
                        operations[key].append({**workers[key].call("edit", name), "round": round_index})
                order = rng.sample(keys, len(keys))
                for position, key in enumerate(order):
                    op = workers[key].call("read", name)
                    operations[key].append({**op, "round": round_index, "position": position})
                    progress.advance(task)
            for key in keys:
                run = workers[key].call("end", name)
                results[key]["runs"].append({**run, "size": label, "operations": operations[key]})
                (workers[key].work / name).unlink(missing_ok=True)  # the copies can be large; logs stay
        phases[f"{transport}_rounds_s"] = time.monotonic() - started
        return [results[key] for key in keys]
    except BaseException:
        # Interrupted (Ctrl-C) or failed: no read is worth waiting for; every process ends at once.
        with sigint_deferred():
            _stop(*(w.process for w in workers.values()), *(w.relay for w in workers.values()))
            _stop(*(w.server for w in workers.values()))
        raise
    finally:
        # Ctrl-C is held back until every worker is closed (raised inside the loop, it left the rest running).
        with sigint_deferred() as interrupted:
            for worker in workers.values():
                if interrupted:  # the rest end at once rather than each finishing its read
                    _stop(worker.process, worker.relay, worker.server)
                worker.close()
                # The client caches hold a copy of every answer (tens of MB); the logs stay for inspection.
                for path in worker.work.glob("*.tools.db*"):
                    path.unlink(missing_ok=True)


def _git(*arguments: str) -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(["git", "-C", str(root), *arguments], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def provenance() -> dict[str, Any]:
    """Which code ran: the commit of the working tree mcpcache was imported from, and whether it was dirty."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit or "unknown", "dirty": bool(status) if status is not None else None}


def run_bench(args: BenchArgs, console: Console) -> dict[str, Any]:
    try:
        return _run_bench(args, console)
    finally:
        with sigint_deferred():  # the workers are stopped by now; the fork server goes last
            stop_fork_server()


def _run_bench(args: BenchArgs, console: Console) -> dict[str, Any]:
    configs = select(args.configs)
    mode = MODES[args.mode]
    args.out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    started = time.monotonic()
    notebooks = _notebooks(args.out, args.sizes, console)
    phases = {"notebooks_s": time.monotonic() - started}
    rng = random.Random(args.seed)
    raw: list[dict[str, Any]] = []
    steps = len(args.transports) * len(args.sizes) * args.reads * len(configs)
    with reporter(console) as progress:
        task = progress.add_task("reads", total=steps)
        for transport in args.transports:
            raw.extend(_run_transport(transport, configs, args, notebooks, progress, task, rng, phases))
        progress.update(task, description="by reference, re-reads, tag cost and tokens")
        extras_started = time.monotonic()
        byref = anyio.run(_byref, mode.byref_runs, mode.byref_bytes) if args.extras else None
        answers = _answer_costs(notebooks, args.sizes) if args.extras else []
        rereads = None
        if args.extras:
            rereads_started = time.monotonic()
            rereads = anyio.run(_rereads, _notebooks(args.out, ("100KB",), console)["100KB"])
            phases["model_rereads_s"] = time.monotonic() - rereads_started
        phases["extras_s"] = time.monotonic() - extras_started
        hops = None
        if args.extras and mode.hops_rounds:
            progress.update(task, description="direct, through the proxy, through the gateway")
            hops_started = time.monotonic()
            hops = anyio.run(_hops, HOPS_SIZE, mode.hops_rounds, args.seed)
            phases["proxy_and_gateway_s"] = time.monotonic() - hops_started
    document: dict[str, Any] = {
        "format": report.FORMAT,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "provenance": provenance(),
        "machine": machine(),
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "args": {**asdict(args), "out": str(args.out)},
        "configs": [asdict(c) for c in configs],
        "seconds": time.monotonic() - started,
        "phases": phases,
        "answers": answers,
        "by_reference": byref,
        "model_rereads": rereads,
        "proxy_and_gateway": hops,
        "raw": raw,
    }
    document = report.resummarize(document)
    json_path = args.out / f"{result_stem(args.mode)}.json"
    json_path.write_text(json.dumps(document, indent=1))
    document["written"] = [str(json_path), *(str(p) for p in report.plot_all(document, json_path))]
    return document


async def _byref(runs: int, resolve_bytes: int) -> dict[str, Any]:
    from mcpcache.bench.byref import run

    return await run(runs=runs, resolve_bytes=resolve_bytes)


async def _rereads(notebook: Path) -> dict[str, Any]:
    from mcpcache.bench.rereads import run

    return await run(notebook=notebook)


async def _hops(size: int, rounds: int, seed: int) -> dict[str, Any]:
    from mcpcache.bench.hops import run

    return await run(size, rounds, seed)


def _answer_costs(notebooks: dict[str, Path], sizes: tuple[str, ...]) -> list[dict[str, Any]]:
    """On each notebook's real answer: the tag's CPU alone (mcpcache against the SHA-256 form), the tokens."""
    from mcpcache.bench.tagcost import measure

    return [measure(label, notebooks[label]) for label in sizes]
