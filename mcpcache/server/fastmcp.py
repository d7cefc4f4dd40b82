"""FastMCP adapter: a middleware that stamps declared tools and answers not-modified.

Place it before (outside) `ResponseCachingMiddleware`: the memo then still saves the server's work, and
this middleware still turns a memo hit into a not-modified reply. Inside the memo it would never run
on a hit. `install` puts it first in the chain and advertises the extension.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import mcp_types as mt
from fastmcp.server.extensions import ServerExtension
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult

from mcpcache.protocol import EXTENSION_ID, META_KEY, extension_settings, with_block
from mcpcache.server.core import Answer, NotModified, PassThrough, Revalidator
from mcpcache.server.policies import ToolPolicies

if TYPE_CHECKING:
    from fastmcp import FastMCP

__all__ = ["RevalidationCapability", "RevalidationMiddleware", "install"]


def _read_answer(result: ToolResult) -> Answer | None:
    if getattr(result, "input_required", None) is not None:
        return None
    return Answer(content=result.content, structured_content=result.structured_content, is_error=result.is_error)


class RevalidationMiddleware(Middleware):
    """Stamps `_meta[META_KEY]` on the answers of declared tools; answers not-modified to matching tags."""

    def __init__(self, policies: ToolPolicies, *, meta_key: str = META_KEY) -> None:
        self.revalidator = Revalidator(policies, meta_key=meta_key)
        self.meta_key = meta_key

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        name = context.message.name
        if name not in self.revalidator.policies:
            return await call_next(context)
        fctx = context.fastmcp_context
        # context.message.meta is rebuilt by FastMCP and never holds the wire _meta; the request's does.
        request_context = fctx.request_context if fctx is not None else None
        request_meta = request_context.meta if request_context is not None else None

        async def has_structured_output() -> bool | None:
            if fctx is None:
                return None
            tool = await fctx.fastmcp.get_tool(name)
            return None if tool is None else tool.output_schema is not None

        outcome = await self.revalidator.call(
            tool=name,
            arguments=context.message.arguments,
            request_meta=request_meta,
            run_body=lambda: call_next(context),
            read_answer=_read_answer,
            has_structured_output=has_structured_output,
        )
        if isinstance(outcome, PassThrough):
            return outcome.result
        if isinstance(outcome, NotModified):
            reply = outcome.reply
            return ToolResult(content=[], structured_content=reply.structured_content, meta=reply.meta)
        result = outcome.result
        stamped = ToolResult(
            content=result.content,
            structured_content=result.structured_content,
            meta=with_block(result.meta, outcome.block, self.meta_key),
            is_error=result.is_error,
        )
        return stamped


class RevalidationCapability(ServerExtension):
    """Advertises `EXTENSION_ID` on protocol 2026-07-28; the middleware does the work."""

    identifier = EXTENSION_ID

    def __init__(self, meta_key: str = META_KEY) -> None:
        self._settings = extension_settings(meta_key)

    def settings(self) -> dict[str, Any]:
        return dict(self._settings)


def install(
    server: FastMCP,
    policies: ToolPolicies | Mapping[str, Any],
    *,
    meta_key: str = META_KEY,
) -> RevalidationMiddleware:
    """Add the middleware as the outermost one and advertise the extension. Returns the middleware."""
    if not isinstance(policies, ToolPolicies):
        policies = ToolPolicies(policies)
    middleware = RevalidationMiddleware(policies, meta_key=meta_key)
    server.middleware.insert(0, middleware)
    server.add_extension(RevalidationCapability(meta_key))
    return middleware
