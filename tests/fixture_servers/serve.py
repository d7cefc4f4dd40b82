"""Run a catalogue server in its own process: `python serve.py <fastmcp|sdk> <stdio|http> [port]`.

Started by the stdio client transports (stdio) or by `tests.support.transports.http_server` (HTTP).
It imports the catalogue from its parent folder, so it runs from any working directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fixture_servers.catalog import build


def main(argv: list[str]) -> None:
    kind, transport, *rest = argv
    if kind not in ("fastmcp", "sdk") or transport not in ("stdio", "http"):
        raise SystemExit(__doc__)
    server = build(kind)  # type: ignore[arg-type]
    if transport == "stdio":
        if kind == "fastmcp":
            server.run(transport="stdio", show_banner=False)  # type: ignore[call-arg]
        else:
            server.run("stdio")
        return
    port = int(rest[0])
    if kind == "fastmcp":
        server.run(transport="http", host="127.0.0.1", port=port, show_banner=False, log_level="warning")  # type: ignore[call-arg]
    else:
        server.run("streamable-http", host="127.0.0.1", port=port)  # type: ignore[call-overload]


if __name__ == "__main__":
    main(sys.argv[1:])
