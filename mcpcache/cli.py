"""The `mcpcache` command."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    name="mcpcache",
    help="Make MCP tool results cheap to ask for twice.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def main() -> None:
    """mcpcache: weak ETags, not-modified replies, a revalidating client cache, results by reference."""


def _say(message: str) -> None:
    # stdout is the protocol channel in stdio mode: anything for a human goes to stderr.
    print(message, file=sys.stderr, flush=True)


@app.command("demo-server")
def demo_server(
    directory: Annotated[
        Path,
        typer.Option("--dir", help="Folder of notebooks to serve (paths outside it and symbolic links are refused)."),
    ] = Path("."),
    http: Annotated[
        int | None,
        typer.Option("--http", metavar="PORT", help="Serve streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio."),
    ] = None,
    generate: Annotated[
        int | None,
        typer.Option("--generate", metavar="N", help="First write a realistic notebook of N cells, demo-N.ipynb."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for --generate.", hidden=True)] = 0,
    validator: Annotated[
        bool, typer.Option("--validator/--no-validator", help="Tag from the file's hash.", hidden=True)
    ] = False,
    memo: Annotated[bool, typer.Option("--memo", help="Add FastMCP's ResponseCachingMiddleware.", hidden=True)] = False,
    revalidation: Annotated[
        bool, typer.Option("--revalidation/--no-revalidation", help="Install mcpcache at all.", hidden=True)
    ] = True,
    ttl_ms: Annotated[int, typer.Option("--ttl-ms", help="Freshness the read tools announce.", hidden=True)] = 5000,
    peer_sha256: Annotated[
        bool, typer.Option("--peer-sha256", help="The SHA-256 revalidation peer instead of mcpcache.", hidden=True)
    ] = False,
) -> None:
    """Serve a folder of Jupyter notebooks with mcpcache (stdio by default)."""
    from mcpcache.demo.notebooks import generate_notebook
    from mcpcache.demo.server import build_demo_server

    if not directory.is_dir():
        raise typer.BadParameter(f"not a folder: {directory}", param_hint="--dir")
    if validator and not revalidation:
        raise typer.BadParameter("--validator needs mcpcache (drop --no-revalidation)", param_hint="--validator")
    if generate is not None:
        if generate < 1:
            raise typer.BadParameter("must be at least 1", param_hint="--generate")
        written = generate_notebook(directory / f"demo-{generate}.ipynb", generate, seed=seed)
        _say(f"mcpcache: wrote {written} ({written.stat().st_size:,} bytes, {generate} cells)")
    if not 0 <= ttl_ms <= 86_400_000:
        raise typer.BadParameter("must be between 0 and 86400000", param_hint="--ttl-ms")
    if peer_sha256:
        revalidation = False
    server = build_demo_server(
        directory, validator=validator, memo=memo, revalidation=revalidation, ttl_ms=ttl_ms, peer_sha256=peer_sha256
    )
    if http is None:
        server.run(transport="stdio", show_banner=False)
    else:
        _say(f"mcpcache: serving {directory.resolve()} at http://127.0.0.1:{http}/mcp")
        server.run(transport="http", host="127.0.0.1", port=http, show_banner=False)


@app.command("bench")
def bench(
    out: Annotated[Path, typer.Option("--out", help="Where bench.json, bench.png and the notebooks go.")] = Path(
        "mcpcache-bench"
    ),
    quick: Annotated[
        bool, typer.Option("--quick", help="100 KB and 1 MB notebooks, fewer reads (under a minute).")
    ] = False,
    sizes: Annotated[
        str | None, typer.Option("--sizes", help="Comma-separated notebook sizes, e.g. 100KB,1MB,5MB,20MB.")
    ] = None,
    reads: Annotated[int | None, typer.Option("--reads", help="Reads of each notebook (R).", min=1)] = None,
    edit_every: Annotated[
        int | None, typer.Option("--edit-every", help="One edit_cell every E reads (0: never).", min=0)
    ] = None,
    transport: Annotated[str, typer.Option("--transport", help="stdio or http (127.0.0.1).")] = "stdio",
    configs: Annotated[
        str | None, typer.Option("--configs", help="Comma-separated configurations (default: all seven).")
    ] = None,
    compare: Annotated[
        tuple[Path, Path] | None,
        typer.Option("--compare", help="Print how two bench.json files differ, then stop.", metavar="OLD NEW"),
    ] = None,
    report_only: Annotated[
        Path | None,
        typer.Option("--report", help="Print the tables of a bench.json and redraw its PNG beside it, then stop."),
    ] = None,
) -> None:
    """Bandwidth, time and token savings on large notebooks, side by side with what users have today."""
    import json

    from rich.console import Console

    from mcpcache.bench import report
    from mcpcache.bench.configs import select
    from mcpcache.bench.runner import DEFAULT_SIZES, QUICK_SIZES, BenchArgs, parse_size, run_bench

    console = Console()
    if compare is not None:
        old, new = (json.loads(path.read_text()) for path in compare)
        report.compare(old, new, console)
        return
    if report_only is not None:
        document = report.resummarize(json.loads(report_only.read_text()))
        report_only.write_text(json.dumps(document, indent=1))
        report.plot(document["summaries"], report_only.with_suffix(".png"))
        report.render_table(document["summaries"], console)
        report.render_limits(document["summaries"], document["answers"], console)
        report.render_extras(document, console)
        return
    if transport not in ("stdio", "http"):
        raise typer.BadParameter("must be stdio or http", param_hint="--transport")
    chosen = (
        tuple(s.strip() for s in sizes.split(",") if s.strip()) if sizes else (QUICK_SIZES if quick else DEFAULT_SIZES)
    )
    try:
        for label in chosen:
            parse_size(label)
        select(configs)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    args = BenchArgs(
        out=out,
        sizes=chosen,
        reads=reads if reads is not None else (6 if quick else 12),
        edit_every=edit_every if edit_every is not None else (3 if quick else 4),
        transport=transport,
        configs=configs,
        quick=quick,
    )
    document = run_bench(args, console)
    report.render_table(document["summaries"], console)
    report.render_limits(document["summaries"], document["answers"], console)
    report.render_extras(document, console)
    console.print(f"wrote {out / 'bench.json'} and {out / 'bench.png'} in {document['seconds']:.0f} s")
