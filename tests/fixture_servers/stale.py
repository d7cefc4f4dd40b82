"""A FastMCP server whose tools grant stale serving (docs/protocol.md section 12), in this process or its own.

`python stale.py http <ttl ms> <port>` serves it over streamable HTTP, `python stale.py stdio <ttl ms>` over stdio
(the tests kill that process).

Tools, each declared in its own meta with `cache_meta` (ttl `TTL_MS`, stale-while-revalidate `SWR_MS`,
stale-if-error `SIE_MS`, unless said otherwise):
- `read(key)`: the current text of `key` and its version (read-only);
- `gated(key)`: as `read`, but waits for the test's gate when one is set (read-only);
- `flaky(key)`: as `read`, but while `failing` the tool itself fails (an `isError` answer, not a JSON-RPC
  error);
- `fallback(key)`: as `read`, with stale-if-error only;
- `untagged(key)`: as `read`, stamped without a tag;
- `edit(key, text)`: changes a text (mutating, not declared);
- `pid()`: the server's process id (read-only, not declared), for a test to kill it by.
While `json_rpc_error` is set, a middleware answers every call of a declared tool with a JSON-RPC error
(`MCPError`), as a server that cannot serve the call does. `runs` counts the bodies that ran, by tool.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types as mt
from fastmcp import FastMCP
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult
from mcp.shared.exceptions import MCPError

from mcpcache.server.fastmcp import install
from mcpcache.server.policies import cache_meta

SCRIPT = Path(__file__).resolve()
TTL_MS = 1_000
SWR_MS = 60_000
SIE_MS = 600_000
DECLARED = ("read", "gated", "flaky", "fallback", "untagged")
READ_ONLY = mt.ToolAnnotations(read_only_hint=True)
MUTATING = mt.ToolAnnotations(read_only_hint=False, destructive_hint=True)


@dataclass
class StaleLab:
    texts: dict[str, str] = field(default_factory=dict)
    versions: Counter[str] = field(default_factory=Counter)
    runs: Counter[str] = field(default_factory=Counter)
    gate: anyio.Event | None = None
    entered: int = 0
    failing: bool = False
    json_rpc_error: bool = False

    def answer(self, tool: str, key: str) -> dict[str, Any]:
        self.runs[tool] += 1
        return {"kind": "doc", "key": key, "text": self.texts.get(key, f"{key}: first"), "version": self.versions[key]}


class _JsonRpcErrors(Middleware):
    def __init__(self, lab: StaleLab) -> None:
        self.lab = lab

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        if self.lab.json_rpc_error and context.message.name in DECLARED:
            raise MCPError(code=mt.INTERNAL_ERROR, message="the backing service is down")
        return await call_next(context)


def build_stale_server(
    lab: StaleLab | None = None, *, ttl_ms: int = TTL_MS, swr_ms: int = SWR_MS, sie_ms: int = SIE_MS
) -> FastMCP:
    lab = lab if lab is not None else StaleLab()
    server = FastMCP("stale-lab")
    declared = cache_meta(ttl_ms=ttl_ms, stale_while_revalidate_ms=swr_ms, stale_if_error_ms=sie_ms)

    @server.tool(meta=declared, annotations=READ_ONLY)
    def read(key: str) -> dict[str, Any]:
        return lab.answer("read", key)

    @server.tool(meta=declared, annotations=READ_ONLY)
    async def gated(key: str) -> dict[str, Any]:
        lab.entered += 1
        if lab.gate is not None:
            await lab.gate.wait()
        return lab.answer("gated", key)

    @server.tool(meta=declared, annotations=READ_ONLY)
    def flaky(key: str) -> dict[str, Any]:
        if lab.failing:
            lab.runs["flaky"] += 1
            raise RuntimeError(f"{key} is unavailable right now")
        return lab.answer("flaky", key)

    @server.tool(meta=cache_meta(ttl_ms=ttl_ms, stale_if_error_ms=sie_ms), annotations=READ_ONLY)
    def fallback(key: str) -> dict[str, Any]:
        return lab.answer("fallback", key)

    untagged_meta = cache_meta(ttl_ms=ttl_ms, etag=False, stale_while_revalidate_ms=swr_ms, stale_if_error_ms=sie_ms)

    @server.tool(meta=untagged_meta, annotations=READ_ONLY)
    def untagged(key: str) -> dict[str, Any]:
        return lab.answer("untagged", key)

    @server.tool(annotations=MUTATING)
    def edit(key: str, text: str) -> str:
        lab.texts[key] = text
        lab.versions[key] += 1
        return "edited"

    @server.tool(annotations=READ_ONLY)
    def pid() -> int:
        return os.getpid()

    # Outside the cache middleware: its JSON-RPC error is what the client meets, with no answer to stamp.
    server.add_middleware(_JsonRpcErrors(lab))
    install(server)
    return server


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        build_stale_server(ttl_ms=int(sys.argv[2])).run(transport="stdio", show_banner=False)
    else:
        assert sys.argv[1] == "http", "usage: stale.py http <ttl ms> <port> | stale.py stdio <ttl ms>"
        build_stale_server(ttl_ms=int(sys.argv[2])).run(  # type: ignore[call-arg]
            transport="http", host="127.0.0.1", port=int(sys.argv[3]), show_banner=False, log_level="warning"
        )
