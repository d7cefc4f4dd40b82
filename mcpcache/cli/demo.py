"""`mcpcache demo-server`: a folder of Jupyter notebooks over MCP, with mcpcache on or off."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mcpcache.cli.app import app, check_port, say
from mcpcache.extras import require

DEMO_HELP = (
    "Serve a folder of Jupyter notebooks with mcpcache (stdio by default)."
    "\n\n"
    "Tools: list_notebooks, read_notebook(path) and read_cell(path, index) are read-only and cacheable: their "
    "answers carry a tag and stay fresh for --ttl-ms (5 s by default), after which a client revalidates and an "
    "unchanged notebook is answered 'not modified', without its body. edit_cell(path, index, source) is never "
    "cached."
)


@app.command("demo-server", help=DEMO_HELP, short_help="Serve a folder of Jupyter notebooks with mcpcache.")
def demo_server(
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            metavar="DIR",
            help="Folder of notebooks to serve (paths outside it and symbolic links are refused). Default: the "
            "demo folder, demo/ in mcpcache's cache folder, so --generate never writes where you stand.",
        ),
    ] = None,
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
    if directory is None:
        directory = _demo_folder()
    if not directory.is_dir():
        raise typer.BadParameter(f"not a folder: {directory}", param_hint="--dir")
    if validator and not revalidation:
        raise typer.BadParameter("--validator needs mcpcache (drop --no-revalidation)", param_hint="--validator")
    if generate is not None and generate < 1:
        raise typer.BadParameter("must be at least 1", param_hint="--generate")
    if not 0 <= ttl_ms <= 86_400_000:
        raise typer.BadParameter("must be between 0 and 86400000", param_hint="--ttl-ms")
    if http is not None:
        check_port(http)
    require("cli", "the demo server")
    from mcpcache.demo.server import build_demo_server

    if generate is not None:
        # Only here: nbformat's schema validation costs seconds of start-up that serving never needs.
        from mcpcache.demo.notebooks import generate_notebook

        written = generate_notebook(directory / f"demo-{generate}.ipynb", generate, seed=seed)
        say(f"mcpcache: wrote {written} ({written.stat().st_size:,} bytes, {generate} cells)")
    if peer_sha256:
        revalidation = False
    server = build_demo_server(
        directory, validator=validator, memo=memo, revalidation=revalidation, ttl_ms=ttl_ms, peer_sha256=peer_sha256
    )
    if http is None:
        server.run(transport="stdio", show_banner=False)
    else:
        say(f"mcpcache: serving {directory.resolve()} at http://127.0.0.1:{http}/mcp")
        # Host and Origin checked (DNS rebinding): a web page cannot reach it through a name of its own.
        server.run(transport="http", host="127.0.0.1", port=http, show_banner=False, host_origin_protection="auto")


def _demo_folder() -> Path:
    """demo/ in the cache folder, made if missing: the notebooks `--generate` writes stay out of the folder
    the command is run from (a clone of the repository, a host's working folder)."""
    from mcpcache.stores.opening import CacheFolderError, cache_dir

    try:
        folder = cache_dir() / "demo"
        folder.mkdir(exist_ok=True)
    except (CacheFolderError, OSError) as exc:
        why = f"the demo folder cannot be used ({exc}); name one with --dir"
        raise typer.BadParameter(why, param_hint="--dir") from None
    return folder
