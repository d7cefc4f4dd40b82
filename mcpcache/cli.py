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
        typer.Option("--configs", metavar="LIST", help="Comma-separated configurations (default: all seven)."),
    ] = None,
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
    """Bytes, time and tokens per read of a large notebook, every configuration interleaved in rounds.

    With no options: the 5 MB notebook over streamable HTTP on 127.0.0.1, all seven configurations, 40
    rounds (about two minutes). Results go to DIR/bench.json and DIR/bench-http.png.
    """
    import os

    from rich.console import Console

    from mcpcache.bench import report
    from mcpcache.bench.configs import select
    from mcpcache.bench.runner import MODES, BenchArgs, parse_size, result_stem, run_bench

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
    if full and quick:
        raise typer.BadParameter("choose one of --full and --quick", param_hint="--full")
    mode = MODES["full" if full else "quick" if quick else "default"]
    transports = tuple(t.strip() for t in transport.split(",") if t.strip()) if transport else mode.transports
    if not transports or any(t not in ("stdio", "http") for t in transports):
        raise typer.BadParameter("must be http, stdio or http,stdio", param_hint="--transport")
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
    )
    document = run_bench(args, console)
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


# -- mcpcache proxy ---------------------------------------------------------------------------------


@app.command("proxy", context_settings={"allow_interspersed_args": False})
def proxy(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="-- COMMAND [ARGS]...", help="The upstream server's command, after `--` (or give --url)."
        ),
    ] = None,
    url: Annotated[
        str | None, typer.Option("--url", metavar="URL", help="A streamable HTTP upstream instead of a command.")
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option("--header", metavar="'NAME: VALUE'", help="An HTTP header for --url (repeatable)."),
    ] = None,
    store: Annotated[
        Path | None,
        typer.Option(
            "--store", metavar="PATH", help="A SQLite file for answers (default: tools.db in the cache folder)."
        ),
    ] = None,
    redis: Annotated[
        str | None, typer.Option("--redis", metavar="URL", help="Keep answers in Redis instead of SQLite.")
    ] = None,
    refs: Annotated[
        bool, typer.Option("--refs", help="Large results reach the model by reference (mcp+cache:// URIs).")
    ] = False,
    partition: Annotated[
        str | None,
        typer.Option(
            "--partition",
            metavar="NAME",
            help="Whose answers these are (default: one per set of --header values, else shared).",
        ),
    ] = None,
    conversation: Annotated[
        str | None,
        typer.Option(
            "--conversation",
            metavar="ID",
            help="With --refs: the conversation references belong to (default: one per proxy run). Proxies "
            "that share a store and this id resolve each other's references.",
        ),
    ] = None,
    server_id: Annotated[
        str | None,
        typer.Option("--server-id", metavar="NAME", help="Name the upstream in cache keys instead of its endpoint."),
    ] = None,
    trust_annotations: Annotated[
        bool,
        typer.Option(
            "--trust-annotations",
            help="Believe the upstream's readOnlyHint: only calls to tools not marked read-only end freshness.",
        ),
    ] = False,
    view_bytes: Annotated[
        int,
        typer.Option(
            "--view-bytes", metavar="N", help="With --refs: results from this size are shown as views.", min=256
        ),
    ] = 4096,
    upstream_era: Annotated[
        str,
        typer.Option(
            "--upstream-era",
            metavar="ERA",
            help="How to talk to the server: legacy (the initialize handshake) or auto (2026-07-28 if it offers it).",
        ),
    ] = "legacy",
    quiet: Annotated[
        bool, typer.Option("--quiet", help="Log only warnings (default: one line per tool call).")
    ] = False,
) -> None:
    """Serve one MCP server to a host over stdio, with every tool call through mcpcache's tool cache.

    \b
      mcpcache proxy -- npx -y some-mcp-server
      mcpcache proxy --refs --url https://host/mcp --header 'Authorization: Bearer ...'
    """
    import os

    import anyio

    from mcpcache.proxy.server import UpstreamUnavailable, configure_logging, serve
    from mcpcache.proxy.settings import (
        ProxySettings,
        RefsSettings,
        SettingsError,
        default_partition,
        new_conversation_id,
        store_choice,
        upstream_from,
    )

    try:
        upstream = upstream_from(command or [], url, header or [], os.getcwd())
        if upstream_era not in ("legacy", "auto"):
            raise SettingsError("--upstream-era must be legacy or auto")
        if conversation is not None and not refs:
            raise SettingsError("--conversation needs --refs")
        settings = ProxySettings(
            upstream=upstream,
            store=store_choice(store, redis),
            partition=partition if partition is not None else default_partition(upstream),
            refs=RefsSettings(conversation or new_conversation_id(), view_bytes, view_bytes) if refs else None,
            server_id=server_id,
            trusted=trust_annotations,
            upstream_era="auto" if upstream_era == "auto" else "legacy",
        )
    except SettingsError as exc:
        _say(f"mcpcache proxy: {exc}")
        raise typer.Exit(2) from None
    configure_logging(verbose=not quiet)
    try:
        anyio.run(serve, settings)
    except UpstreamUnavailable as exc:
        _say(f"mcpcache proxy: {exc}")
        raise typer.Exit(1) from None
