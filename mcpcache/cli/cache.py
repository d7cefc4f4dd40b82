"""`mcpcache cache ls | stats | clear`: see and clear the answers the client cache keeps."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from mcpcache.cli.app import app
from mcpcache.extras import MissingExtra

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
    from mcpcache.stores.opening import TOOLS_FILE, CacheFolderError, default_path, open_store

    if redis is not None:
        try:
            return open_store(redis=redis, namespace=namespace), f"{redis} (namespace {namespace})"
        except ValueError as exc:
            raise _cache_failed(str(exc)) from None
    if store is None:
        try:
            path = default_path(TOOLS_FILE)
        except CacheFolderError as exc:
            raise _cache_failed(f"{exc} (or give --store PATH)") from None
        if not path.exists():
            return None
    else:
        path = store
    problem = cache_file_problem(path)
    if problem is not None:
        raise _cache_failed(problem)
    return open_store(sqlite=path), str(path)


def _run_on_cache(
    store: Path | None,
    redis: str | None,
    namespace: str,
    action: Callable[[Any, str], Awaitable[None]],
    nothing: Callable[[str], None] | None = None,
) -> None:
    """Open the store, run `action` on it, close it; a store that fails is one line and exit code 1.
    `nothing(path)` says that the default file does not exist yet (default: two lines of prose)."""
    import anyio

    opened = _cache_store(store, redis, namespace)
    if opened is None:
        from mcpcache.stores.opening import TOOLS_FILE, default_path

        path = str(default_path(TOOLS_FILE))
        if nothing is not None:
            nothing(path)
            return
        print(f"Nothing cached yet: {path} does not exist.")
        print("ToolCache() keeps the answers it may reuse there, once a server marks them cacheable.")
        return

    async def run() -> None:
        async with opened[0] as cache_store:
            await action(cache_store, opened[1])

    try:
        anyio.run(run)
    except MissingExtra:
        raise  # one line naming the extra, said by the command itself
    except typer.Abort:  # the confirmation got no answer (end of input)
        raise _cache_failed("nothing removed: no answer to the question (pass --yes not to be asked)", 1) from None
    except (OSError, RuntimeError) as exc:  # sqlite3 and redis errors derive from neither: caught below
        raise _cache_failed(f"{opened[1]}: {exc}", 1) from None
    except Exception as exc:
        module = type(exc).__module__.split(".")[0]
        if module not in ("sqlite3", "redis", "mcpcache"):
            raise
        raise _cache_failed(f"{opened[1]}: {exc}", 1) from None


def _print_json(document: dict[str, Any]) -> None:
    import json

    print(json.dumps(document, indent=2, ensure_ascii=False))


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


_STALE_HELP = (
    "stale windows: how long after freshness ends the answer may still be served, at once while it is "
    "revalidated, or when the server cannot answer (docs/client.md, Serving stale)."
)


def _stale_windows(while_revalidating_ms: int, if_error_ms: int) -> str:
    """The entry's stale windows in a few words ("" when it has none)."""
    from mcpcache.client.policy import readable_duration

    parts = []
    if while_revalidating_ms > 0:
        parts.append(f"{readable_duration(while_revalidating_ms / 1000)} while revalidating")
    if if_error_ms > 0:
        parts.append(f"{readable_duration(if_error_ms / 1000)} on error")
    return f"; stale windows: {', '.join(parts)}" if parts else ""


_ERA_HELP = (
    "Protocol: the MCP version the answer came in. One call is kept once per version: the versions' answers "
    "differ (2026-07-28 adds the server's name and version to each answer's _meta)."
)


_ENTRY_HEADINGS = ("Server", "Tool", "Arguments", "Size", "Age", "Freshness", "Tag", "Protocol")
_ENTRY_ORDER = (0, 1, 7, 2, 3, 4, 5, 6)
"""The columns left to right: the protocol version beside the tool, as it is part of what names the call."""


def _entries_table(
    rows: list[tuple[str, ...]], fresh: list[bool], width: int, *, with_server: bool, with_era: bool
) -> Any:
    """The `ls` table: every column keeps its width but the server and the arguments, which share what is left
    (cut short with an ellipsis; rich would squeeze the freshness off the edge instead). A narrow terminal
    loses the tag column first. The server and the protocol version get a column only when the rows differ
    in them (otherwise they are said once above the table)."""
    from rich import box
    from rich.table import Table

    chosen = [column for column in _ENTRY_ORDER if (with_server or column != 0) and (with_era or column != 7)]
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
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="One JSON document instead of the table: the store, the totals, and every field of each answer "
            "(the tag whole); --limit applies.",
        ),
    ] = False,
) -> None:
    """List the cached answers: server, tool, protocol version, arguments, size, age, freshness and tag."""
    import time

    from mcpcache.client.entries import TOOLS_GROUP
    from mcpcache.client.inventory import cached_entries
    from mcpcache.client.policy import readable_duration
    from mcpcache.stores.items import Match

    async def listed(cache_store: Any, where: str) -> None:
        total = await cache_store.count(Match(TOOLS_GROUP, server, tool))
        entries: list[dict[str, Any]] = []
        now = time.time()
        if total.items:
            async for entry in cached_entries(cache_store, server=server, tool=tool):
                entries.append({**dataclasses.asdict(entry), "age_s": round(max(now - entry.stored_at, 0.0), 3)})
                if len(entries) >= limit:
                    break
        _print_json({"store": where, "answers": total.items, "bytes": total.bytes, "entries": entries})

    def nothing_json(path: str) -> None:
        _print_json({"store": path, "answers": 0, "bytes": 0, "entries": []})

    if as_json:
        _run_on_cache(store, redis, namespace, listed, nothing_json)
        return

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
            tag, era = _short_tag(entry.etag), entry.era or "(not recorded)"
            windows = _stale_windows(entry.stale_while_revalidate_ms, entry.stale_if_error_ms)
            freshness = entry.freshness + windows
            rows.append((server_label, entry.tool, arguments, _bytes(entry.size), age, freshness, tag, era))
            fresh.append(entry.fresh)
            if len(rows) >= limit:
                break
        if not rows:  # records of another shape: the cache drops them when it meets them
            console.print("None of them is in a form this version of mcpcache reads.")
            return
        servers, eras = {row[0] for row in rows}, {row[7] for row in rows}
        # Said once above the table when all rows share it, which leaves the room to the arguments.
        above = [f"Server: {next(iter(servers))}"] if len(servers) == 1 else []
        if len(eras) == 1:
            above.append(f"protocol {next(iter(eras))}")
        if above:
            console.print("; ".join(above))
        table = _entries_table(rows, fresh, console.width, with_server=len(servers) > 1, with_era=len(eras) > 1)
        console.print(table)
        if len(eras) > 1:
            console.print(_ERA_HELP, style="dim")
        console.print(_FRESHNESS_HELP, style="dim")
        if any("; stale windows: " in row[5] for row in rows):
            console.print(_STALE_HELP, style="dim")

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
    from mcpcache.client.policy import readable_duration

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
    from mcpcache.stores.items import Match

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
