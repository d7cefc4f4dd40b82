"""The tag a server of ours stamps on an answer, recomputed from what arrived.

The MCP SDK's `MCPServer` adapter always stamps the content tag (support/tags.py). FastMCP with
`install()` stamps a raw-value tag (domain `mcpcache/raw/v1`) when the tool returned a value of exact
JSON types that FastMCP converted: that value is read back from what arrived (the structured content,
unwrapped from `result` when the output schema says FastMCP wrapped it, or the text of a `str` answer
without structured content) and hashed in the tool's domain. Anything else carries the content tag.
"""

from __future__ import annotations

from typing import Any

import mcp_types as mt
from fastmcp import FastMCP
from mcp.server.mcpserver import MCPServer

from mcpcache.canonical import CanonicalizationError
from mcpcache.etag import raw_tag
from mcpcache.protocol import META_KEY
from mcpcache.server.fastmcp import raw_tag_domain
from support.tags import answered_meta, tag_of

_NOTHING = object()


def _raw_value(tool_return: Any, schema: dict[str, Any] | None, result: mt.CallToolResult) -> Any:
    structured = result.structured_content
    meta = {key: value for key, value in (answered_meta(result) or {}).items() if key != META_KEY}
    if meta not in ({}, {"fastmcp": {"wrap_result": True}}):
        return _NOTHING  # a tool that set its own _meta returned a ToolResult: nothing was converted
    if schema is not None and schema.get("x-fastmcp-wrap-result"):
        return structured["result"] if isinstance(structured, dict) else _NOTHING
    if structured is not None:
        return structured
    if tool_return is str and len(result.content) == 1 and isinstance(result.content[0], mt.TextContent):
        return result.content[0].text
    return _NOTHING


async def served_tag(server: FastMCP | MCPServer, tool: str, result: mt.CallToolResult) -> str:
    """The tag `server` stamps on `result`, an answer of `tool` as it arrived."""
    if not isinstance(server, FastMCP):
        return tag_of(result)
    found = await server.get_tool(tool)
    assert found is not None
    domain = raw_tag_domain(found)
    value = _raw_value(found.return_type, found.output_schema, result)
    if domain is None or value is _NOTHING or (isinstance(value, bool | int | float) and found.return_type is str):
        return tag_of(result)
    try:
        return raw_tag(domain, value)
    except CanonicalizationError:
        return tag_of(result)
