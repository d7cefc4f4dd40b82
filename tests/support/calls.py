"""Calling tools the way the tests need to: as a stock client would, and raw with a conditional `_meta`.

`call_stock` goes through each client's own `call_tool`, so the client's output-schema validation runs
(FastMCP's also parses `data`). `call_raw` sends the request on the client's SDK session without
validation, which is how a revalidating client reads a not-modified reply to a tool whose schema
requires more than `kind`. Both return the MCP SDK's `CallToolResult`.
"""

from __future__ import annotations

from typing import Any

import fastmcp
import mcp_types as mt

from mcpcache.protocol import META_KEY, CacheBlock, conditional_request_meta, parse_cache_block

from .transports import StockClient


async def call_stock(client: StockClient, name: str, arguments: dict[str, Any], **kwargs: Any) -> mt.CallToolResult:
    if isinstance(client, fastmcp.Client):
        result = await client.call_tool(name, arguments, raise_on_error=False, **kwargs)
        return mt.CallToolResult(
            content=result.content,
            structured_content=result.structured_content,
            is_error=result.is_error,
            _meta=result.meta,
        )
    return await client.call_tool(name, arguments, **kwargs)


async def call_raw(
    client: StockClient, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
) -> mt.CallToolResult:
    params = mt.CallToolRequestParams(name=name, arguments=arguments, _meta=meta)
    return await client.session.send_request(mt.CallToolRequest(params=params), mt.CallToolResult)


async def call_conditional(client: StockClient, name: str, arguments: dict[str, Any], etag: Any) -> mt.CallToolResult:
    """A conditional call (docs/protocol.md section 3); `etag` may be anything, malformed tags included."""
    meta = conditional_request_meta(etag) if isinstance(etag, str) else {META_KEY: {"etag": etag}}
    return await call_raw(client, name, arguments, meta)


def block_of(result: mt.CallToolResult) -> CacheBlock | None:
    return parse_cache_block(result.meta)


def raw_block(result: mt.CallToolResult) -> dict[str, Any] | None:
    """The cache block exactly as it arrived, without the tolerant reading."""
    meta = result.meta or {}
    block = meta.get(META_KEY)
    return dict(block) if isinstance(block, dict) else None


def wire(result: mt.CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)
