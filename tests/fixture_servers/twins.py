"""A small FastMCP server for the timeout and identity tests, in this process or in its own.

`python twins.py <stdio|http> [port]`. Every instance has the same name and version, whatever data it
serves: the data is chosen by the environment (`TWIN_DATA`), or else by a `twin-data.txt` file in the
working directory, or else is "default". So two instances are two servers that report the same
identity and answer differently, and a cache that took one for the other would serve the wrong data.

Tools:
- `whoami()`: which data this instance serves (cacheable, 60 s).
- `slow(key, delay)`: reads the current text of `key`, then waits `delay` seconds before answering
  (cacheable, 5 s, read-only); what it answers is what was current when its body started.
- `write(key, text)`: changes a text (mutating, not declared cacheable).
- `body_runs(key)`: how many times `slow` ran for `key` (undeclared).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import mcp_types as mt
from fastmcp import FastMCP

from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies

NAME = "twin"
VERSION = "1.0.0"
DATA_ENV = "TWIN_DATA"
DATA_FILE = "twin-data.txt"
SCRIPT = Path(__file__).resolve()


def data_label() -> str:
    if os.environ.get(DATA_ENV):
        return os.environ[DATA_ENV]
    path = Path.cwd() / DATA_FILE
    return path.read_text().strip() if path.exists() else "default"


def build_twins(data: str | None = None) -> FastMCP:
    label = data if data is not None else data_label()
    texts: dict[str, str] = {}
    runs: Counter[str] = Counter()
    server = FastMCP(NAME, version=VERSION)

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=True))
    def whoami() -> dict[str, Any]:
        return {"kind": "twin", "data": label}

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=True))
    async def slow(key: str, delay: float) -> dict[str, Any]:
        runs[key] += 1
        text = texts.get(key, f"{key}: first edition")
        await anyio.sleep(delay)
        return {"kind": "doc", "key": key, "text": text, "data": label}

    @server.tool(annotations=mt.ToolAnnotations(read_only_hint=False, destructive_hint=True))
    def write(key: str, text: str) -> str:
        texts[key] = text
        return "written"

    @server.tool
    def body_runs(key: str) -> int:
        return runs[key]

    install(server, ToolPolicies({"whoami": CachePolicy(ttl_ms=60000), "slow": CachePolicy(ttl_ms=5000)}))
    return server


def main(argv: list[str]) -> None:
    transport, *rest = argv
    server = build_twins()
    if transport == "stdio":
        server.run(transport="stdio", show_banner=False)  # type: ignore[call-arg]
    elif transport == "http":
        server.run(transport="http", host="127.0.0.1", port=int(rest[0]), show_banner=False, log_level="warning")  # type: ignore[call-arg]
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
