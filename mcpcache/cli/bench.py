"""`mcpcache bench`: bytes, time and tokens per read of a large notebook, configurations side by side."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from mcpcache.cli.app import app
from mcpcache.extras import require

BENCH_HELP = (
    "Bytes, time and tokens per read of a large notebook, every configuration interleaved in rounds."
    "\n\n"
    "With no options: the 5 MB notebook over streamable HTTP on 127.0.0.1, all eight configurations, 40 rounds "
    "(about two minutes). Results go to DIR/bench.json and DIR/bench-http.png."
)


@app.command("bench", help=BENCH_HELP)
def bench(
    out: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="Where bench.json, its PNGs and the notebooks go.")
    ] = Path("mcpcache-bench"),
    full: Annotated[
        bool,
        typer.Option(
            "--full", metavar="", help="Every size (100 KB to 20 MB) over HTTP and stdio (about 20 min on 2 cores)."
        ),
    ] = False,
    quick: Annotated[
        bool,
        typer.Option("--quick", metavar="", help="A smoke run (100 KB, 6 reads, under 30 s); writes bench-quick.json."),
    ] = False,
    sizes: Annotated[
        str | None,
        typer.Option("--sizes", metavar="LIST", help="Comma-separated notebook sizes, e.g. 100KB,1MB,5MB,20MB."),
    ] = None,
    reads: Annotated[
        int | None, typer.Option("--reads", metavar="R", help="Reads of each notebook (rounds).", min=1)
    ] = None,
    edit_every: Annotated[
        int | None, typer.Option("--edit-every", metavar="E", help="One edit_cell every E rounds (0: never).", min=0)
    ] = None,
    transport: Annotated[
        str | None, typer.Option("--transport", metavar="NAME", help="http (127.0.0.1), stdio, or http,stdio.")
    ] = None,
    configs: Annotated[
        str | None,
        typer.Option("--configs", metavar="LIST", help="Comma-separated configurations (default: all eight)."),
    ] = None,
    link: Annotated[
        str | None,
        typer.Option(
            "--link",
            metavar="RATE",
            help="Read every HTTP configuration through a simulated link of this rate each way (e.g. 100mbit, "
            "10mbit), with --latency one way; the tables, PNG and JSON say it is simulated.",
        ),
    ] = None,
    latency: Annotated[
        float,
        typer.Option("--latency", metavar="MS", help="The simulated link's one-way latency (with --link).", min=0),
    ] = 20.0,
    compare: Annotated[
        tuple[Path, Path] | None,
        typer.Option("--compare", help="Print how two bench.json files differ, then stop.", metavar="OLD NEW"),
    ] = None,
    extras: Annotated[
        bool, typer.Option("--extras/--no-extras", help="By reference and the tag's cost alone.", hidden=True)
    ] = True,
    report_only: Annotated[
        Path | None,
        typer.Option(
            "--report",
            metavar="FILE",
            help="Print the tables of a bench.json and redraw its PNGs beside it, then stop.",
        ),
    ] = None,
) -> None:
    import os

    require("bench", "the benchmark")
    from rich.console import Console

    from mcpcache.bench import report

    # Piped or captured, rich would assume 80 columns; the tables are laid out for 100.
    console = Console() if sys.stdout.isatty() or "COLUMNS" in os.environ else Console(width=100)
    try:
        if compare is not None:
            old, new = (report.load(path) for path in compare)
            report.compare(old, new, console)
            return
        if report_only is not None:
            document = report.load(report_only)
            report.render_table(document, console)
            report.render_limits(document["summaries"], document.get("answers") or [], console)
            report.render_extras(document, console)
            pngs = report.plot_all(document, report_only)
            console.print(f"redrew {', '.join(str(p) for p in pngs)}")
            return
    except report.NotABenchFile as exc:
        print(f"mcpcache bench: {exc}", file=sys.stderr)  # one line, unwrapped
        raise typer.Exit(2) from None
    # Only a run needs the runner (and the clients and servers it imports: seconds).
    from mcpcache.bench.configs import select
    from mcpcache.bench.runner import MODES, BenchArgs, parse_size, result_stem, run_bench

    if full and quick:
        raise typer.BadParameter("choose one of --full and --quick", param_hint="--full")
    mode = MODES["full" if full else "quick" if quick else "default"]
    transports = tuple(t.strip() for t in transport.split(",") if t.strip()) if transport else mode.transports
    if not transports or any(t not in ("stdio", "http") for t in transports):
        raise typer.BadParameter("must be http, stdio or http,stdio", param_hint="--transport")
    if link is not None:
        from mcpcache.bench.relay import parse_link

        try:
            parse_link(link, latency)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--link") from exc
        if "stdio" in transports:
            raise typer.BadParameter("a simulated link carries HTTP only: use --transport http", param_hint="--link")
    chosen = tuple(s.strip() for s in sizes.split(",") if s.strip()) if sizes else mode.sizes
    try:
        for label in chosen:
            parse_size(label)
        select(configs)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    args = BenchArgs(
        out=out,
        mode=mode.name,
        sizes=tuple(dict.fromkeys(chosen)),
        transports=tuple(dict.fromkeys(transports)),
        reads=reads if reads is not None else mode.reads,
        edit_every=edit_every if edit_every is not None else mode.edit_every,
        configs=configs,
        extras=extras,
        link=link,
        latency_ms=latency,
    )
    try:
        document = run_bench(args, console)
    except KeyboardInterrupt:
        # The runner has stopped its workers and servers by the time this is raised.
        console.file.flush()
        print("mcpcache bench: interrupted", file=sys.stderr, flush=True)
        raise typer.Exit(130) from None
    report.render_table(document, console)
    report.render_limits(document["summaries"], document["answers"], console)
    report.render_extras(document, console)
    load = document["load_average"]
    console.print(
        f"{mode.name} run in {document['seconds']:.0f} s (load average {load['before'][0]:.2f} before, "
        f"{load['after'][0]:.2f} after); wrote {', '.join(document['written'])}"
    )
    if mode.name == "quick":
        console.print(f"a quick run is a smoke test: it never replaces {out / result_stem('default')}.json")


# mcpcache gateway ----------------------------------------------------------------------------------
