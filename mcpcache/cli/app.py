"""The `mcpcache` command group, and what its commands share: one-line refusals, the version, messages for
people on stderr, the port check. Each command lives in a module of its own beside this one."""

from __future__ import annotations

import errno
import re
import socket
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup, TyperOption

from mcpcache.extras import MissingExtra


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


def say(message: str) -> None:
    # stdout is the protocol channel in stdio mode: anything for a human goes to stderr.
    print(message, file=sys.stderr, flush=True)


def port_problem(port: int, host: str = "127.0.0.1") -> str | None:
    """Why `host:port` cannot be served (None: it can), found by binding it as uvicorn will."""
    probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        # As uvicorn binds: with SO_REUSEADDR, so only a socket that is listening there refuses us.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return "in use (another server is listening there)"
        return f"not available ({exc.strerror or exc})"
    finally:
        probe.close()
    return None


def check_port(port: int) -> None:
    """Refuse a port that cannot be served before saying it is served: out of range, or taken."""
    if not 1 <= port <= 65535:
        raise typer.BadParameter(f"{port} is not a port (1 to 65535)", param_hint="--http")
    reason = port_problem(port)
    if reason is not None:
        raise typer.BadParameter(f"127.0.0.1:{port} is {reason}", param_hint="--http")
