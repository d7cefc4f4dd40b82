"""The `mcpcache` command."""

from __future__ import annotations

import errno
import re
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from typer.core import TyperGroup, TyperOption

from mcpcache.extras import MissingExtra, require


def _quiet_flags(command: Any, ctx: Any) -> None:
    # typer shows a flag's type, `<bool>`, where a flag takes no value: an empty metavar shows nothing.
    for param in [*command.params, command.get_help_option(ctx)]:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _quiet_flags(sub, ctx)


class _Group(TyperGroup):
    """The command group: flags shown without `<bool>`, and every refusal one line on stderr with exit 2."""

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if isinstance(option, TyperOption):
            option.metavar = ""
        return option

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _quiet_flags(command, ctx)
        return command

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except typer.TyperException as exc:  # click's usage errors: typer would draw them in a box
            ctx = getattr(exc, "ctx", None)
            where = ctx.command_path if ctx is not None else (prog_name or "mcpcache")
            message = re.sub(r"\s*\n\s*", " ", exc.format_message()).strip()
            hint = f" (see {where} --help)" if ctx is not None else ""
            print(f"{where}: {message}{hint}", file=sys.stderr)
            sys.exit(exc.exit_code)
        except MissingExtra as exc:
            print(exc, file=sys.stderr)
            sys.exit(2)
        except typer.Abort:
            print("Aborted!", file=sys.stderr)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name="mcpcache",
    help="Make MCP tool results cheap to ask for twice.",
    no_args_is_help=True,
    add_completion=False,
    cls=_Group,
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mcpcache")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from mcpcache import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        print(f"mcpcache {_version()}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", metavar="", help="Print the version and exit.", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    """mcpcache: weak ETags, not-modified replies, a revalidating client cache, results by reference."""


def _say(message: str) -> None:
    # stdout is the protocol channel in stdio mode: anything for a human goes to stderr.
    print(message, file=sys.stderr, flush=True)


DEMO_HELP = (
    "Serve a folder of Jupyter notebooks with mcpcache (stdio by default)."
    "\n\n"
    "Tools: list_notebooks, read_notebook(path) and read_cell(path, index) are read-only and cacheable: their "
    "answers carry a tag and stay fresh for --ttl-ms (5 s by default), after which a client revalidates and an "
    "unchanged notebook is answered 'not modified', without its body. edit_cell(path, index, source) is never "
    "cached."
)


def _check_port(port: int) -> None:
    """Refuse a port that cannot be served before saying it is served: out of range, or taken."""
    if not 1 <= port <= 65535:
        raise typer.BadParameter(f"{port} is not a port (1 to 65535)", param_hint="--http")
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # As uvicorn binds: with SO_REUSEADDR, so only a socket that is listening there refuses us.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            reason = "in use (another server is listening there)"
        else:
            reason = f"not available ({exc.strerror or exc})"
        raise typer.BadParameter(f"127.0.0.1:{port} is {reason}", param_hint="--http") from None
    finally:
        probe.close()


@app.command("demo-server", help=DEMO_HELP, short_help="Serve a folder of Jupyter notebooks with mcpcache.")
def demo_server(
    directory: Annotated[
        Path,
        typer.Option(
            "--dir",
            metavar="DIR",
            help="Folder of notebooks to serve (paths outside it and symbolic links are refused).",
        ),
    ] = Path("."),
    http: Annotated[
        int | None,
        typer.Option("--http", metavar="PORT", help="Serve streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio."),
    ] = None,
    generate: Annotated[
        int | None,
        typer.Option("--generate", metavar="N", help="First write a realistic notebook of N cells, demo-N.ipynb."),
    ] = None,
    ttl_ms: Annotated[
        int,
        typer.Option(
            "--ttl-ms",
            metavar="MS",
            help="How long answers of the read tools stay fresh; 0: a client revalidates before every reuse.",
        ),
    ] = 5000,
    validator: Annotated[
        bool,
        typer.Option(
            "--validator",
            metavar="",
            help="Tag read_notebook and read_cell from the file's hash, before the tool runs: an unchanged "
            "notebook is not even read.",
        ),
    ] = False,
    no_revalidation: Annotated[
        bool,
        typer.Option(
            "--no-revalidation",
            metavar="",
            help="Plain FastMCP, without mcpcache: no tags, no 'not modified'. The upstream to put an mcpcache "
            "proxy or gateway in front of, and the benchmark's baseline.",
        ),
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed for --generate.", hidden=True)] = 0,
    memo: Annotated[bool, typer.Option("--memo", help="Add FastMCP's ResponseCachingMiddleware.", hidden=True)] = False,
    peer_sha256: Annotated[
        bool, typer.Option("--peer-sha256", help="The SHA-256 revalidation peer instead of mcpcache.", hidden=True)
    ] = False,
) -> None:
    # Every argument is checked before anything is written or served.
    revalidation = not no_revalidation
    if not directory.is_dir():
        raise typer.BadParameter(f"not a folder: {directory}", param_hint="--dir")
    if validator and not revalidation:
        raise typer.BadParameter("--validator needs mcpcache (drop --no-revalidation)", param_hint="--validator")
    if generate is not None and generate < 1:
        raise typer.BadParameter("must be at least 1", param_hint="--generate")
    if not 0 <= ttl_ms <= 86_400_000:
        raise typer.BadParameter("must be between 0 and 86400000", param_hint="--ttl-ms")
    if http is not None:
        _check_port(http)
    require("cli", "the demo server")
    from mcpcache.demo.server import build_demo_server

    if generate is not None:
        # Only here: nbformat's schema validation costs seconds of start-up that serving never needs.
        from mcpcache.demo.notebooks import generate_notebook

        written = generate_notebook(directory / f"demo-{generate}.ipynb", generate, seed=seed)
        _say(f"mcpcache: wrote {written} ({written.stat().st_size:,} bytes, {generate} cells)")
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


BENCH_HELP = (
    "Bytes, time and tokens per read of a large notebook, every configuration interleaved in rounds."
    "\n\n"
    "With no options: the 5 MB notebook over streamable HTTP on 127.0.0.1, all seven configurations, 40 rounds "
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


# mcpcache gateway ----------------------------------------------------------------------------------


@app.command("gateway", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def gateway(
    ctx: typer.Context,
    config: Annotated[
        Path | None, typer.Option("--config", metavar="FILE", help="The gateway's TOML configuration.")
    ] = None,
    upstream: Annotated[
        str | None,
        typer.Option(
            "--upstream",
            metavar="URL",
            help="For a first try without a file: one upstream, a URL, or `--upstream -- COMMAND...` for stdio.",
        ),
    ] = None,
    tool: Annotated[
        list[str] | None,
        typer.Option("--tool", metavar="NAME=TTL_MS", help="Declare a tool (with --upstream); add :public or :notag."),
    ] = None,
    redis: Annotated[
        str | None, typer.Option("--redis", metavar="URL", help="Share one Redis store with other replicas.")
    ] = None,
    host: Annotated[str | None, typer.Option("--host", help="Listen address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Listen port (default 8765; 0: any free port).")] = None,
) -> None:
    """Serve upstream MCP servers over streamable HTTP, stamping tags and answering not-modified for the
    tools the configuration declares (docs/gateway.md)."""
    from mcpcache.gateway.config import ConfigError, load_config, quick_config, with_overrides

    # Click ends options at `--`: `--upstream -- python -m server` leaves "--" as the option's value.
    command = list(ctx.args)
    if upstream == "--":
        upstream = None
    try:
        if command and command[0].startswith("-") and not (upstream is None and config is None):
            raise ConfigError(f"unknown option {command[0]}")
        if config is not None:
            if upstream is not None or command or tool:
                raise ConfigError("--config names the upstreams and tools: drop --upstream, --tool and any command")
            settings = load_config(config)
        elif upstream is not None or command:
            if upstream is not None and command:
                raise ConfigError(f"give one upstream, a URL or a command after --, not both (got {' '.join(command)})")
            settings = quick_config(url=upstream, command=command or None, tools=tool or [])
        else:
            raise ConfigError("name the upstreams: --config FILE, or --upstream URL, or --upstream -- COMMAND...")
        settings = with_overrides(settings, redis=redis, host=host, port=port)
    except ConfigError as exc:
        print(f"mcpcache gateway: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None

    from mcpcache.bench.common import free_port
    from mcpcache.client.identity import shown_url
    from mcpcache.gateway.app import KEEP_ALIVE_S, build_gateway, open_store

    serve = settings.gateway
    bound = serve.port or free_port()
    try:
        shared = open_store(settings.store) if settings.store is not None else None
        server = build_gateway(settings, store=shared).server
    except (OSError, ValueError) as exc:  # an unreadable key file, say: one line, nothing started
        print(f"mcpcache gateway: cannot start: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    declared = [
        f"{up.public_name(name)} ({t.ttl_ms if t.ttl_ms is not None else 'upstream'} ms, {t.scope})"
        for up in settings.upstreams.values()
        for name, t in up.tools.items()
    ]
    where = "; ".join(
        f"{name}: {shown_url(up.url) if up.url else ' '.join(up.command or [])}"
        for name, up in settings.upstreams.items()
    )
    store_text = "none (tags and not-modified only)"
    if settings.store is not None:
        store_text = settings.store.redis or settings.store.sqlite or "memory (this process only)"
    _say(f"mcpcache gateway: serving http://{serve.host}:{bound}{serve.path}")
    _say(f"  upstreams: {where}")
    _say(f"  declared: {', '.join(declared) or 'none (every tool passes through untouched)'}")
    _say(f"  store: {store_text}; auth: {settings.auth.kind}")
    keep_alive = {"timeout_keep_alive": KEEP_ALIVE_S}
    server.run(
        transport="http", host=serve.host, port=bound, path=serve.path, show_banner=False, uvicorn_config=keep_alive
    )


# -- mcpcache check ------------------------------------------------------------------------------------

# Imported here, with the check command, so that cli.py merges cleanly.
from typing import NoReturn  # noqa: E402

from typer.core import TyperCommand  # noqa: E402

_CHECK_ARGV = "mcpcache.check.argv"


class _CheckCommand(TyperCommand):
    """Keeps the raw arguments (to pair each `--args` with the `--tool`/`--mutate` before it, which
    click's per-option tuples lose) and turns click's usage errors into one line and exit status 2."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # click's Context, as typer vendors it
        ctx.meta[_CHECK_ARGV] = list(args)
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:
            message = getattr(exc, "format_message", None)
            if message is None or getattr(exc, "exit_code", None) != 2:
                raise
            _check_usage(message())


def _check_usage(message: str) -> NoReturn:
    print(f"mcpcache check: {' '.join(message.split())}", file=sys.stderr)
    raise typer.Exit(2)


@app.command("check", cls=_CheckCommand)
def check(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None, typer.Argument(metavar="[-- SERVER_COMMAND]", help="A server to start over stdio.")
    ] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", metavar="URL", help="A streamable HTTP server, e.g. http://127.0.0.1:8000/mcp."),
    ] = None,
    tool: Annotated[
        list[str] | None, typer.Option("--tool", metavar="NAME", help="Probe this tool (repeatable); --args after it.")
    ] = None,
    args: Annotated[
        list[str] | None, typer.Option("--args", metavar="JSON", help="Arguments of the --tool or --mutate before it.")
    ] = None,
    mutate: Annotated[
        list[str] | None,
        typer.Option("--mutate", metavar="NAME", help="A call that changes what the probed tools read (repeatable)."),
    ] = None,
    args_from: Annotated[
        Path | None,
        typer.Option(
            "--args-from", metavar="FILE", help='Arguments by tool name, a JSON object: {"read_cell": {"index": 0}}.'
        ),
    ] = None,
    meta_key: Annotated[
        str, typer.Option("--meta-key", metavar="KEY", help="Where the cache block lives in _meta.")
    ] = "io.modelcontextprotocol/cache",
    legacy: Annotated[
        bool, typer.Option("--legacy", help="Speak protocol 2025-11-25 (initialize) instead of the latest.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", metavar="S", help="Seconds to wait for each reply.", min=0.1)
    ] = 60.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON (for CI) instead of tables.")
    ] = False,
    client: Annotated[
        bool, typer.Option("--client", help="Check a client instead: serve the scripted server it is pointed at.")
    ] = False,
    http: Annotated[
        int | None,
        typer.Option("--http", metavar="PORT", help="--client: serve streamable HTTP on 127.0.0.1:PORT/mcp."),
    ] = None,
    calls: Annotated[
        int | None, typer.Option("--calls", metavar="N", help="--client: report after N tool calls.", min=1)
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", metavar="FILE", help="Also write the JSON report to FILE.")
    ] = None,
) -> None:
    """Check a server (or with --client, a client) against the revalidation rules of docs/protocol.md.

    Exit status 0: conforms; 1: a required scenario failed, or the server does not implement tool-result
    caching, or it could not be reached; 2: usage error; 3: inconclusive (no tagged tool could be checked).
    """
    import os

    import anyio
    from rich.console import Console

    from mcpcache.check.render import render, to_json

    if client:
        if url or command or tool or mutate or args_from:
            _check_usage("--client serves a scripted server: it takes no --url, server command, --tool or --mutate")
        from mcpcache.check.scripted import serve_client_check

        report = serve_client_check(http_port=http, calls=calls)
    else:
        if http is not None or calls is not None:
            _check_usage("--http and --calls go with --client")
        if bool(url) == bool(command):
            _check_usage("give a server: --url http://host/mcp, or -- followed by the command that starts it")
        from mcpcache.check.probe import CheckOptions, Target, check_server, parse_arguments, parse_arguments_file
        from mcpcache.check.selection import ToolCall

        try:
            tools, mutations = _paired_calls(ctx.meta.get(_CHECK_ARGV, []), parse_arguments)
            known = parse_arguments_file(args_from) if args_from is not None else None
        except ValueError as exc:
            _check_usage(str(exc))
        target = Target.http(url) if url else Target.stdio(command or [])
        options = CheckOptions(
            calls=tuple(ToolCall(n, a) for n, a in tools),
            known_arguments=known,
            mutations=tuple(ToolCall(n, a if a is not None else {}) for n, a in mutations),
            meta_key=meta_key,
            era="legacy" if legacy else "auto",
            timeout_s=timeout,
        )
        try:
            report = anyio.run(check_server, target, options)
        except Exception as exc:  # the server could not be reached or spoke no MCP: one line, no traceback
            cause: BaseException = exc
            while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
                cause = cause.exceptions[0]  # anyio's task groups wrap the one failure that matters
            why = " ".join(f"{type(cause).__name__}: {cause}".split())
            print(f"mcpcache check: could not check {target.label}: {why}", file=sys.stderr)
            raise typer.Exit(1) from None
    if out is not None:
        out.write_text(to_json(report))
    # In stdio client mode stdout is the protocol channel: the report goes to stderr.
    stream = sys.stderr if client and http is None else sys.stdout
    if as_json:
        print(to_json(report), file=stream, flush=True)
    else:
        # Piped or captured, rich would assume 80 columns; the tables are laid out for 120.
        wide = stream.isatty() or "COLUMNS" in os.environ
        render(report, Console(file=stream) if wide else Console(file=stream, width=120))
    raise typer.Exit(report.exit_status)


def _paired_calls(
    argv: list[str], parse: Callable[[str], dict[str, Any]]
) -> tuple[list[tuple[str, dict[str, Any] | None]], list[tuple[str, dict[str, Any] | None]]]:
    """(--tool calls, --mutate calls) from the raw arguments, each `--args` going to the option before it."""
    tools: list[tuple[str, dict[str, Any] | None]] = []
    mutations: list[tuple[str, dict[str, Any] | None]] = []
    last: list[tuple[str, dict[str, Any] | None]] | None = None
    tokens = iter(argv[: argv.index("--")] if "--" in argv else argv)
    for token in tokens:
        name, eq, inline = token.partition("=")
        if name not in ("--tool", "--mutate", "--args"):
            continue
        value = inline if eq else next(tokens, None)
        if value is None:
            raise ValueError(f"{name} needs a value")
        if name == "--args":
            if last is None or last[-1][1] is not None:
                raise ValueError("--args must follow the --tool NAME or --mutate NAME it belongs to")
            last[-1] = (last[-1][0], parse(value))
        else:
            last = tools if name == "--tool" else mutations
            last.append((value, None))
    return tools, mutations


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
            help="Whose answers these are (default: a digest of the credentials: the URL's userinfo and --header "
            "values, or a stdio upstream's environment).",
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
            partition=partition if partition is not None else default_partition(upstream, os.environ),
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
    from mcpcache.stores.opening import TOOLS_FILE, default_path, open_store

    if redis is not None:
        try:
            return open_store(redis=redis, namespace=namespace), f"{redis} (namespace {namespace})"
        except ValueError as exc:
            raise _cache_failed(str(exc)) from None
    if store is None:
        path = default_path(TOOLS_FILE)
        if not path.exists():
            return None
    else:
        path = store
    problem = cache_file_problem(path)
    if problem is not None:
        raise _cache_failed(problem)
    return open_store(sqlite=path), str(path)


def _run_on_cache(
    store: Path | None, redis: str | None, namespace: str, action: Callable[[Any, str], Awaitable[None]]
) -> None:
    """Open the store, run `action` on it, close it; a store that fails is one line and exit code 1."""
    import anyio

    opened = _cache_store(store, redis, namespace)
    if opened is None:
        from mcpcache.stores.opening import TOOLS_FILE, default_path

        print(f"Nothing cached yet: {default_path(TOOLS_FILE)} does not exist.")
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
    from mcpcache.client.policy import readable_duration
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
