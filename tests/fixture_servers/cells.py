"""A notebook of cells whose answers differ only in `_meta`, on FastMCP or on the MCP SDK `MCPServer`.

`read_cell` answers a cell's source as text and as structured content, and names the cell's id in its
`_meta` (the way jupyter-mcp-server's `read_cell` names `io.jupyter-mcp/cell_id`); `read_cell_text` does
the same without structured content. `replace_cell` (undeclared) puts a new cell, with a new id, in
place of one: given the same source, the new answer's content is identical to the old one and only its
`_meta` differs. Cells are kept per `notebook` name, so tests sharing a server process use their own.

Run in its own process with `python cells.py <fastmcp|sdk> <stdio|http> [port]`.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import mcp_types as mt
from fastmcp import FastMCP
from fastmcp.tools.base import ToolResult
from mcp.server.mcpserver import MCPServer

from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.server.sdk import RevalidationExtension

ServerKind = Literal["fastmcp", "sdk"]
SCRIPT = Path(__file__).resolve()
CELL_ID_KEY = "example.com/cell_id"
KIND = "notebook.cell"
POLICIES = {"read_cell": CachePolicy(ttl_ms=5000, kind=KIND), "read_cell_text": CachePolicy(ttl_ms=5000)}


class Cells:
    """Sources by (notebook, index); a cell's id changes whenever the cell is replaced."""

    def __init__(self) -> None:
        self.sources: dict[tuple[str, int], str] = {}
        self.replaced: Counter[tuple[str, int]] = Counter()

    def source(self, notebook: str, index: int) -> str:
        return self.sources.get((notebook, index), f"x = {index}")

    def cell_id(self, notebook: str, index: int) -> str:
        return f"{notebook}-{index}-{self.replaced[(notebook, index)]}"

    def replace(self, notebook: str, index: int, source: str) -> str:
        self.sources[(notebook, index)] = source
        self.replaced[(notebook, index)] += 1
        return self.cell_id(notebook, index)

    def parts(self, notebook: str, index: int) -> tuple[list[mt.TextContent], dict[str, Any], dict[str, Any]]:
        source = self.source(notebook, index)
        return (
            [mt.TextContent(type="text", text=source)],
            {"kind": KIND, "source": source},
            {CELL_ID_KEY: self.cell_id(notebook, index)},
        )


def build_fastmcp(cells: Cells) -> FastMCP:
    server = FastMCP("cells-fastmcp")

    @server.tool
    def read_cell(notebook: str, index: int) -> ToolResult:
        content, structured, meta = cells.parts(notebook, index)
        return ToolResult(content=content, structured_content=structured, meta=meta)

    @server.tool(output_schema=None)
    def read_cell_text(notebook: str, index: int) -> ToolResult:
        content, _, meta = cells.parts(notebook, index)
        return ToolResult(content=content, meta=meta)

    @server.tool
    def replace_cell(notebook: str, index: int, source: str) -> str:
        return cells.replace(notebook, index, source)

    install(server, ToolPolicies(POLICIES))
    return server


def build_sdk(cells: Cells) -> MCPServer:
    server = MCPServer("cells-sdk", extensions=[RevalidationExtension(ToolPolicies(POLICIES))])

    @server.tool()
    def read_cell(notebook: str, index: int) -> mt.CallToolResult:
        content, structured, meta = cells.parts(notebook, index)
        return mt.CallToolResult(content=content, structured_content=structured, _meta=meta)

    @server.tool()
    def read_cell_text(notebook: str, index: int) -> mt.CallToolResult:
        content, _, meta = cells.parts(notebook, index)
        return mt.CallToolResult(content=content, _meta=meta)

    @server.tool()
    def replace_cell(notebook: str, index: int, source: str) -> str:
        return cells.replace(notebook, index, source)

    return server


def build(kind: ServerKind, cells: Cells | None = None) -> FastMCP | MCPServer:
    cells = cells if cells is not None else Cells()
    return build_fastmcp(cells) if kind == "fastmcp" else build_sdk(cells)


def main(argv: list[str]) -> None:
    kind, transport, *rest = argv
    if kind not in ("fastmcp", "sdk") or transport not in ("stdio", "http"):
        raise SystemExit(__doc__)
    server = build(kind)  # type: ignore[arg-type]
    if isinstance(server, FastMCP):
        if transport == "stdio":
            server.run(transport="stdio", show_banner=False)
        else:
            server.run(transport="http", host="127.0.0.1", port=int(rest[0]), show_banner=False, log_level="warning")
    elif transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(rest[0]))


if __name__ == "__main__":
    main(sys.argv[1:])
