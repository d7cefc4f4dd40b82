"""`mcpcache check`: the conformance suite, against a server or a client."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperCommand

from mcpcache.cli.app import app

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
    checks: Annotated[
        Path | None,
        typer.Option(
            "--checks",
            metavar="FILE",
            help="Also write the results as the MCP conformance suite's checks.json (a JSON array of checks).",
        ),
    ] = None,
) -> None:
    """Check a server (or with --client, a client) against the revalidation rules of docs/protocol.md.

    Exit status 0: conforms; 1: a required scenario failed, or the server does not implement tool-result
    caching, or it could not be reached; 2: usage error; 3: inconclusive (no tagged tool could be checked)
    or incomplete (a required rule went unexercised, or a tool could not be checked: the last line says what
    would).
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
        if url:
            from mcpcache.proxy.settings import SettingsError, upstream_from

            try:  # the proxy's rule and words for a URL, so that both commands refuse the same ones alike
                upstream_from((), url, (), None)
            except SettingsError as exc:
                _check_usage(str(exc))
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
    if checks is not None:
        from mcpcache.check.checks_json import to_checks_json

        checks.write_text(to_checks_json(report) + "\n")
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
