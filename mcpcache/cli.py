"""The `mcpcache` command."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Literal

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


# -- mcpcache cache: see and clear what the client cache keeps ----------------------------------------------

cache_app = typer.Typer(
    name="cache",
    help="See and clear the answers the client cache (ToolCache) keeps.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(cache_app, name="cache")

_StorePath = Annotated[
    Path | None,
    typer.Option("--store", metavar="PATH", help="A cache file (default: the file ToolCache() uses)."),
]
_RedisURL = Annotated[
    str | None,
    typer.Option(
        "--redis", metavar="URL", help="The Redis a RedisStore keeps the cache in, e.g. redis://127.0.0.1:6379/0."
    ),
]
_Namespace = Annotated[
    str, typer.Option("--namespace", metavar="NAME", help="The RedisStore's namespace (with --redis).")
]
_Server = Annotated[
    str | None, typer.Option("--server", metavar="SERVER", help="Only answers from this server, as `ls` shows it.")
]
_Tool = Annotated[str | None, typer.Option("--tool", metavar="TOOL", help="Only answers of this tool.")]


def _cache_failed(message: str, code: int = 2) -> typer.Exit:
    print(f"mcpcache cache: {message}", file=sys.stderr)  # one line, unwrapped
    return typer.Exit(code)


def _cache_store(store: Path | None, redis: str | None, namespace: str) -> tuple[Any, str] | None:
    """The store to look at and how to name it; None when the default file does not exist yet."""
    from mcpcache.client.inventory import cache_file_problem

    if store is not None and redis is not None:
        raise _cache_failed("choose one of --store and --redis")
    if redis is not None:
        from mcpcache.stores import RedisStore

        try:
            return RedisStore(redis, namespace=namespace), f"{redis} (namespace {namespace})"
        except ValueError as exc:
            raise _cache_failed(str(exc)) from None
    if store is None:
        from mcpcache.paths import default_path

        path = default_path("tools.db")
        if not path.exists():
            return None
    else:
        path = store
    problem = cache_file_problem(path)
    if problem is not None:
        raise _cache_failed(problem)
    from mcpcache.stores import SQLiteStore

    return SQLiteStore(path), str(path)


def _run_on_cache(
    store: Path | None, redis: str | None, namespace: str, action: Callable[[Any, str], Awaitable[None]]
) -> None:
    """Open the store, run `action` on it, close it; a store that fails is one line and exit code 1."""
    import anyio

    opened = _cache_store(store, redis, namespace)
    if opened is None:
        from mcpcache.paths import default_path

        print(f"Nothing cached yet: {default_path('tools.db')} does not exist.")
        print("ToolCache() keeps the answers it may reuse there, once a server marks them cacheable.")
        return

    async def run() -> None:
        async with opened[0] as cache_store:
            await action(cache_store, opened[1])

    try:
        anyio.run(run)
    except typer.Abort:  # the confirmation got no answer (end of input)
        raise _cache_failed("nothing removed: no answer to the question (pass --yes not to be asked)", 1) from None
    except (OSError, RuntimeError) as exc:  # sqlite3 and redis errors derive from neither: caught below
        raise _cache_failed(f"{opened[1]}: {exc}", 1) from None
    except Exception as exc:
        module = type(exc).__module__.split(".")[0]
        if module not in ("sqlite3", "redis", "mcpcache"):
            raise
        raise _cache_failed(f"{opened[1]}: {exc}", 1) from None


def _cache_console() -> Any:
    import os

    from rich.console import Console

    # Piped or captured, rich would assume 80 columns: too few for a row of this table.
    return Console() if sys.stdout.isatty() or "COLUMNS" in os.environ else Console(width=140)


def _bytes(count: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _short_tag(etag: str | None) -> str:
    """Enough of a tag to tell two versions apart at a glance: W/"8c01c18f…"."""
    if etag is None:
        return "none"
    return etag if len(etag) <= 12 else etag[:11] + "…"


def _answers(count: int) -> str:
    return f"{count:,} cached answer{'' if count == 1 else 's'}"


def _selection(server: str | None, tool: str | None) -> str:
    parts = [f"server {server}" if server is not None else "", f"tool {tool}" if tool is not None else ""]
    chosen = ", ".join(part for part in parts if part)
    return f" ({chosen})" if chosen else ""


_FRESHNESS_HELP = (
    "fresh: served again without asking the server. stale: the next call asks the server; an answer with a tag "
    "is then confirmed in a few bytes ('not modified') if nothing changed."
)


_ENTRY_HEADINGS = ("Server", "Tool", "Arguments", "Size", "Age", "Freshness", "Tag")


def _entries_table(rows: list[tuple[str, ...]], fresh: list[bool], width: int, *, with_server: bool) -> Any:
    """The `ls` table: every column keeps its width but the server and the arguments, which share what is left
    (cut short with an ellipsis; rich would squeeze the freshness off the edge instead). A narrow terminal
    loses the tag column first."""
    from rich import box
    from rich.table import Table

    chosen = [column for column in range(len(_ENTRY_HEADINGS)) if with_server or column != 0]
    widths = {column: max(len(_ENTRY_HEADINGS[column]), *(len(row[column]) for row in rows)) for column in chosen}
    widths[1] = min(widths[1], 24)
    flexible = [column for column in (0, 2) if column in chosen]

    def left() -> int:  # each column but the first has a separator and two pads before it
        fixed = sum(w for column, w in widths.items() if column not in flexible)
        return width - fixed - 3 * (len(chosen) - 1)

    if left() < 20 * len(flexible):
        chosen.remove(6)
        del widths[6]
    share = left()
    if 0 in chosen:
        widths[0] = min(widths[0], max(share * 2 // 5, 10))
        share -= widths[0]
    widths[2] = min(widths[2], max(share, 10))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in chosen:
        justify: Literal["left", "right"] = "right" if _ENTRY_HEADINGS[column] in ("Size", "Age") else "left"
        table.add_column(_ENTRY_HEADINGS[column], justify=justify, no_wrap=True, width=widths[column])
    for row, is_fresh in zip(rows, fresh, strict=True):
        cells = {column: _cut(row[column], widths[column]) for column in chosen}
        cells[5] = f"[{'green' if is_fresh else 'yellow'}]{cells[5]}[/]"
        table.add_row(*(cells[column] for column in chosen))
    return table


@cache_app.command("ls")
def cache_ls(
    server: _Server = None,
    tool: _Tool = None,
    limit: Annotated[int, typer.Option("--limit", metavar="N", min=1, help="Show at most N answers.")] = 50,
    store: _StorePath = None,
    redis: _RedisURL = None,
    namespace: _Namespace = "mcpcache",
) -> None:
    """List the cached answers: server, tool, arguments, size, age, freshness and tag."""
    import time

    from mcpcache.client.entries import TOOLS_GROUP
    from mcpcache.client.inventory import cached_entries
    from mcpcache.policy import readable_duration
    from mcpcache.stores.base import Match

    async def show(cache_store: Any, where: str) -> None:
        console = _cache_console()
        total = await cache_store.count(Match(TOOLS_GROUP, server, tool))
        if total.items == 0:
            console.print(f"No cached answers{_selection(server, tool)} in {where}.")
            return
        shown = f"; the first {limit} are shown (--limit)" if total.items > limit else ""
        console.print(f"{_answers(total.items)} ({_bytes(total.bytes)}){_selection(server, tool)} in {where}{shown}")
        now = time.time()
        rows: list[tuple[str, ...]] = []
        fresh: list[bool] = []
        async for entry in cached_entries(cache_store, server=server, tool=tool):
            age = readable_duration(max(now - entry.stored_at, 0.0))
            server_label, arguments = entry.server or "(not recorded)", entry.arguments or "(not recorded)"
            tag = _short_tag(entry.etag)
            rows.append((server_label, entry.tool, arguments, _bytes(entry.size), age, entry.freshness, tag))
            fresh.append(entry.fresh)
            if len(rows) >= limit:
                break
        if not rows:  # records of another shape: the cache drops them when it meets them
            console.print("None of them is in a form this version of mcpcache reads.")
            return
        servers = {row[0] for row in rows}
        if len(servers) == 1:  # said once above the table, which leaves the room to the arguments
            console.print(f"Server: {next(iter(servers))}")
        console.print(_entries_table(rows, fresh, console.width, with_server=len(servers) > 1))
        console.print(_FRESHNESS_HELP, style="dim")

    _run_on_cache(store, redis, namespace, show)


@cache_app.command("stats")
def cache_stats(
    server: _Server = None,
    tool: _Tool = None,
    store: _StorePath = None,
    redis: _RedisURL = None,
    namespace: _Namespace = "mcpcache",
) -> None:
    """Totals: how many answers, how many still fresh, how many bytes, by server and tool."""
    import time

    from rich import box
    from rich.table import Table

    from mcpcache.client.inventory import summarize
    from mcpcache.policy import readable_duration

    async def show(cache_store: Any, where: str) -> None:
        console = _cache_console()
        summary = await summarize(cache_store, server=server, tool=tool)
        console.print(f"Cache: {where}{_selection(server, tool)}")
        if summary.entries == 0:
            console.print("No cached answers.")
            return
        stale = summary.entries - summary.fresh
        console.print(f"{_answers(summary.entries)}: {summary.fresh} fresh, {stale} stale, {_bytes(summary.bytes)}")
        if summary.oldest is not None and summary.newest is not None:
            now = time.time()
            oldest, newest = (readable_duration(max(now - at, 0.0)) for at in (summary.oldest, summary.newest))
            console.print(f"Stored between {oldest} and {newest} ago.")
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("Server", max_width=48, overflow="ellipsis", no_wrap=True)
        table.add_column("Tool", max_width=32, overflow="ellipsis", no_wrap=True)
        for heading in ("Answers", "Fresh", "Size"):
            table.add_column(heading, justify="right")
        for tally in sorted(summary.by_tool.values(), key=lambda t: (-t.bytes, t.server, t.tool)):
            table.add_row(
                tally.server or "(not recorded)",
                tally.tool,
                f"{tally.entries:,}",
                f"{tally.fresh:,}",
                _bytes(tally.bytes),
            )
        console.print(table)
        console.print(_FRESHNESS_HELP, style="dim")

    _run_on_cache(store, redis, namespace, show)


@cache_app.command("clear")
def cache_clear(
    server: _Server = None,
    tool: _Tool = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    store: _StorePath = None,
    redis: _RedisURL = None,
    namespace: _Namespace = "mcpcache",
) -> None:
    """Remove cached answers (all of them, or one server's or one tool's); asks first unless --yes."""
    from mcpcache.client.entries import TOOLS_GROUP
    from mcpcache.stores.base import Match

    match = Match(TOOLS_GROUP, server, tool)

    async def clear(cache_store: Any, where: str) -> None:
        found = await cache_store.count(match)
        if found.items == 0:
            print(f"No cached answers{_selection(server, tool)} in {where}: nothing to remove.")
            return
        print(f"This removes {_answers(found.items)} ({_bytes(found.bytes)}){_selection(server, tool)} from {where}.")
        if not yes and not typer.confirm("Remove them?", default=False):
            print("Nothing removed.")
            return
        removed = await cache_store.remove_matching(match)
        print(f"Removed {_answers(removed)}.")

    _run_on_cache(store, redis, namespace, clear)
