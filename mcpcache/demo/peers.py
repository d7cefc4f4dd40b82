"""What a user has today, written here so the demo server can run it beside mcpcache (for the benchmark).

`datalayer_tag` and `Sha256Revalidation` follow the revalidation of the Datalayer Jupyter MCP server
as it is described (a weak tag from sha256 of `json.dumps(sort_keys=True, separators=(",", ":"))`, its
first 32 hex digits; the tool runs on every call and a matching tag gets a not-modified reply). They are
written from that description, not copied, and kept minimal: the point is its cost, not its features.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import mcp_types as mt
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult

from mcpcache.etag import wire_content
from mcpcache.protocol import META_KEY, answer_kind

__all__ = ["Sha256Revalidation", "datalayer_tag"]


def datalayer_tag(document: Any) -> str:
    """The SHA-256 form: sha256 of sorted, compact `json.dumps`, first 32 hex digits, weak."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return f'W/"{hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]}"'


class Sha256Revalidation(Middleware):
    """Stamps the SHA-256 form on the tools it is given and answers not-modified to a matching tag."""

    def __init__(self, tools: dict[str, int]) -> None:
        """`tools`: tool name -> ttlMs to stamp."""
        self.tools = dict(tools)

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        name = context.message.name
        if name not in self.tools:
            return await call_next(context)
        rc = context.fastmcp_context.request_context if context.fastmcp_context else None
        wanted = (((rc.meta if rc else None) or {}).get(META_KEY) or {}).get("etag")
        result = await call_next(context)
        if result.is_error:
            return result
        tag = datalayer_tag({"content": wire_content(result.content), "structuredContent": result.structured_content})
        block = {"ttlMs": self.tools[name], "cacheScope": "private", "etag": tag}
        if wanted == tag:
            kind = answer_kind(result.structured_content) or name
            return ToolResult(
                content=[], structured_content={"kind": kind}, meta={META_KEY: {**block, "notModified": True}}
            )
        return ToolResult(
            content=result.content,
            structured_content=result.structured_content,
            meta={**(result.meta or {}), META_KEY: block},
            is_error=result.is_error,
        )
