"""Two servers the check cannot call conforming, each for its own reason, on the MCP SDK's low-level `Server`.

- `keyed`: its only tagged tool, `lookup(key)`, needs an argument that neither its input schema's examples
  nor any other tool's answer gives; `status()` answers with a cache block that has `ttlMs` and no tag.
  Without `--tool lookup --args ...` the check can show nothing about revalidation: inconclusive.
- `plain`: never heard of the extension, like mcp-server-time: `now()` (read-only, no arguments) and
  `convert(value)` answer without a cache block. The check says it does not implement tool-result caching.

`python tests/check/outsiders.py keyed|plain` serves one over stdio, for the CLI tests.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

import anyio
import mcp_types as mt
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from mcpcache.etag import content_tag
from mcpcache.protocol import META_KEY, weak_equal

Kind = Literal["keyed", "plain"]
READ_ONLY = mt.ToolAnnotations(read_only_hint=True)
KEYED_SCHEMA = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


def build_outsider(kind: Kind) -> Server[Any]:
    if kind == "keyed":
        tools = [
            mt.Tool(name="lookup", input_schema=KEYED_SCHEMA, annotations=READ_ONLY),
            mt.Tool(name="status", input_schema={"type": "object", "properties": {}}, annotations=READ_ONLY),
        ]
    else:
        tools = [
            mt.Tool(name="now", input_schema={"type": "object", "properties": {}}, annotations=READ_ONLY),
            mt.Tool(name="convert", input_schema={**KEYED_SCHEMA, "properties": {"value": {"type": "string"}}}),
        ]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListToolsResult:
        return mt.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext[Any], params: mt.CallToolRequestParams) -> mt.CallToolResult:
        arguments = params.arguments or {}
        if params.name == "status":
            return mt.CallToolResult.model_validate(
                {"content": _text("up"), "_meta": {META_KEY: {"ttlMs": 1000, "cacheScope": "public"}}}
            )
        if params.name == "lookup":
            key = arguments.get("key")
            if not isinstance(key, str):
                return mt.CallToolResult.model_validate({"content": _text("key is required"), "isError": True})
            content = _text(f"the entry for {key}")
            tag = content_tag(content, None)
            block_in = (params.meta or {}).get(META_KEY)
            if isinstance(block_in, dict) and weak_equal(block_in.get("etag"), tag):
                return mt.CallToolResult.model_validate(
                    {
                        "content": [],
                        "_meta": {META_KEY: {"ttlMs": 0, "cacheScope": "private", "etag": tag, "notModified": True}},
                    }
                )
            return mt.CallToolResult.model_validate(
                {"content": content, "_meta": {META_KEY: {"ttlMs": 0, "cacheScope": "private", "etag": tag}}}
            )
        if params.name == "now":
            return mt.CallToolResult.model_validate({"content": _text("2026-12-01T12:00:00Z")})
        value = arguments.get("value")
        if not isinstance(value, str):
            return mt.CallToolResult.model_validate({"content": _text("value is required"), "isError": True})
        return mt.CallToolResult.model_validate({"content": _text(value.upper())})

    return Server(f"outsider-{kind}", on_list_tools=list_tools, on_call_tool=call_tool)


async def _serve_stdio(kind: Kind) -> None:
    from mcp.server.stdio import stdio_server

    server = build_outsider(kind)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    chosen = sys.argv[1]
    assert chosen in ("keyed", "plain"), chosen
    anyio.run(_serve_stdio, chosen)
