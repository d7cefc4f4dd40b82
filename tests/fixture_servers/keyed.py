"""A FastMCP server whose tools take a volatile argument, for the key-arguments tests (docs/protocol.md section 8).

`python keyed.py http <port>` serves it over streamable HTTP on 127.0.0.1; `build_keyed()` builds it in process.

Tools (each counts its body runs by path in `runs`):
- `read_doc(path, request_id="")`: the document at `path`; declared with `ignoreArguments: ["request_id"]`,
  60 s, read-only. What it answers never depends on `request_id`.
- `read_kept(path, request_id="", trace=False)`: the same, declared with `keyArguments: ["path"]` and ttl 0,
  so every reuse revalidates (a not-modified reply, or a delta once the document changed).
- `read_plain(path, request_id="")`: declared cacheable (60 s) with no key arguments: every argument names the
  answer.
- `read_bad(path, request_id="")`: answers with a cache block (60 s), but its `tools/list` entry carries a
  malformed `keyArguments` (a string), written over the listing by an outer middleware.
- `gated(path, request_id="")`: like `read_doc`, but its body waits for `gate` (set by the test) when one is
  set: to hold concurrent callers in flight together.
- `edit(path, line, text)`: changes one line of a document (mutating, undeclared).
- `body_runs(tool, path)`: how many times that tool's body ran for `path` (undeclared).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import anyio
import mcp_types as mt
from fastmcp import FastMCP
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import Tool

from mcpcache.protocol import META_KEY
from mcpcache.server import cache_meta
from mcpcache.server.fastmcp import install

READ = mt.ToolAnnotations(read_only_hint=True)
LINES = 80


class KeyedState:
    def __init__(self) -> None:
        self.docs: dict[str, list[str]] = {}
        self.runs: Counter[tuple[str, str]] = Counter()
        self.gate: anyio.Event | None = None

    def doc(self, tool: str, path: str) -> dict[str, Any]:
        self.runs[(tool, path)] += 1
        lines = self.docs.setdefault(path, [f"{path} line {n}: " + "x" * 40 for n in range(LINES)])
        return {"kind": "doc", "path": path, "text": "\n".join(lines)}


class _MalformedListing(Middleware):
    """Writes a malformed key declaration over `read_bad`'s tools/list entry (outermost, after install)."""

    async def on_list_tools(
        self, context: MiddlewareContext[mt.ListToolsRequest], call_next: CallNext[mt.ListToolsRequest, Sequence[Tool]]
    ) -> Sequence[Tool]:
        tools = await call_next(context)
        listed = []
        for tool in tools:
            if tool.name == "read_bad":
                block = {**(tool.meta or {}).get(META_KEY, {}), "keyArguments": "path"}
                tool = tool.model_copy(update={"meta": {**(tool.meta or {}), META_KEY: block}})
            listed.append(tool)
        return listed


def build_keyed(state: KeyedState | None = None) -> FastMCP[Any]:
    state = state if state is not None else KeyedState()
    server: FastMCP[Any] = FastMCP("keyed")

    @server.tool(annotations=READ, meta=cache_meta(ttl_ms=60_000, ignore_arguments=["request_id"]))
    def read_doc(path: str, request_id: str = "") -> dict[str, Any]:
        return state.doc("read_doc", path)

    @server.tool(annotations=READ, meta=cache_meta(ttl_ms=0, key_arguments=["path"]))
    def read_kept(path: str, request_id: str = "", trace: bool = False) -> dict[str, Any]:
        return state.doc("read_kept", path)

    @server.tool(annotations=READ, meta=cache_meta(ttl_ms=60_000))
    def read_plain(path: str, request_id: str = "") -> dict[str, Any]:
        return state.doc("read_plain", path)

    @server.tool(annotations=READ, meta=cache_meta(ttl_ms=60_000))
    def read_bad(path: str, request_id: str = "") -> dict[str, Any]:
        return state.doc("read_bad", path)

    @server.tool(annotations=READ, meta=cache_meta(ttl_ms=60_000, ignore_arguments=["request_id"]))
    async def gated(path: str, request_id: str = "") -> dict[str, Any]:
        if state.gate is not None:
            await state.gate.wait()
        return state.doc("gated", path)

    @server.tool
    def edit(path: str, line: int, text: str) -> str:
        state.doc("edit", path)
        state.docs[path][line] = text
        return "edited"

    @server.tool
    def body_runs(tool: str, path: str) -> int:
        return state.runs[(tool, path)]

    install(server)
    server.middleware.insert(0, _MalformedListing())
    return server


if __name__ == "__main__":
    transport, port = sys.argv[1], int(sys.argv[2])
    assert transport == "http"
    build_keyed().run(transport="http", host="127.0.0.1", port=port, show_banner=False)
