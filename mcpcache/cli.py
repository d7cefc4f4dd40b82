"""The `mcpcache` command."""

from __future__ import annotations

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
