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
        Path, typer.Option("--dir", help="Folder of notebooks to serve (paths outside it are refused).")
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
    server = build_demo_server(directory, validator=validator, memo=memo, revalidation=revalidation)
    if http is None:
        server.run(transport="stdio", show_banner=False)
    else:
        _say(f"mcpcache: serving {directory.resolve()} at http://127.0.0.1:{http}/mcp")
        server.run(transport="http", host="127.0.0.1", port=http, show_banner=False)
