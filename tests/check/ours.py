"""mcpcache's own servers for the conformance check: the same tools on FastMCP (`install`) and on the MCP
SDK's `MCPServer` (`RevalidationExtension`).

- `read(key)`: a dict of about 4 KB (so a not-modified reply has a margin to show), annotated read-only;
- `read_rev(key)`: the tool builds its own result with a `_meta` revision the tag must cover;
- `edit(key, text)` changes the text; `bump(key)` changes only the revision.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

import mcp_types as mt
from fastmcp import FastMCP
from fastmcp.tools.base import ToolResult
from mcp.server.mcpserver import MCPServer

from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.server.sdk import RevalidationExtension

ServerKind = Literal["fastmcp", "sdk"]
REV_KEY = "example.com/rev"
POLICIES = {"read": CachePolicy(ttl_ms=5000, kind="doc"), "read_rev": CachePolicy(ttl_ms=0, kind="doc.rev")}
READ_ONLY = mt.ToolAnnotations(read_only_hint=True)


class Source:
    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.revs: Counter[str] = Counter()

    def text(self, key: str) -> str:
        return self.texts.get(key, f"{key}: first edition\n" + "lorem ipsum " * 340)


def build_ours(kind: ServerKind) -> FastMCP | MCPServer:
    source = Source()

    def read(key: str) -> dict[str, Any]:
        return {"kind": "doc", "key": key, "text": source.text(key)}

    def edit(key: str, text: str) -> str:
        source.texts[key] = text
        return "edited"

    def bump(key: str) -> str:
        source.revs[key] += 1
        return "bumped"

    def rev_parts(key: str) -> tuple[list[mt.TextContent], dict[str, Any], dict[str, Any]]:
        return [mt.TextContent(type="text", text=source.text(key))], {"key": key}, {REV_KEY: source.revs[key]}

    if kind == "fastmcp":
        server = FastMCP("ours-fastmcp")
        server.tool(read, annotations=READ_ONLY)

        @server.tool(annotations=READ_ONLY)
        def read_rev(key: str) -> ToolResult:
            content, structured, meta = rev_parts(key)
            return ToolResult(content=content, structured_content=structured, meta=meta)

        server.tool(edit)
        server.tool(bump)
        install(server, ToolPolicies(POLICIES))
        return server

    sdk = MCPServer("ours-sdk", extensions=[RevalidationExtension(ToolPolicies(POLICIES))])
    sdk.add_tool(read, annotations=READ_ONLY)

    def read_rev_sdk(key: str) -> mt.CallToolResult:
        content, structured, meta = rev_parts(key)
        return mt.CallToolResult(content=content, structured_content=structured, _meta=meta)

    sdk.add_tool(read_rev_sdk, name="read_rev", annotations=READ_ONLY)
    sdk.add_tool(edit)
    sdk.add_tool(bump)
    return sdk
