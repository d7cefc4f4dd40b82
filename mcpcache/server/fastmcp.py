"""FastMCP adapter: a middleware that stamps declared tools and answers not-modified.

Place it before (outside) `ResponseCachingMiddleware`: the memo then still saves the server's work, and
this middleware still turns a memo hit into a not-modified reply. `install` puts it first in the chain
and advertises the extension. The middleware also looks at where memos sit on every call and stays
correct whatever the order: behind a memo it makes no not-modified replies (the memo would keep one and
serve it to stock clients), and in front of one it does not use validators for the tools the memo
covers (the memo may answer from an older version than the validator names).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, assert_never

import mcp_types as mt
from fastmcp.server.extensions import ServerExtension
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.server.middleware.caching import ResponseCachingMiddleware
from fastmcp.tools.base import ToolResult

from mcpcache.protocol import EXTENSION_ID, META_KEY, extension_settings, with_block
from mcpcache.server.core import Answer, NotModified, PassThrough, Revalidator, Stamped
from mcpcache.server.policies import ToolPolicies

if TYPE_CHECKING:
    from fastmcp import FastMCP

__all__ = ["RevalidationCapability", "RevalidationMiddleware", "install"]


def _memo_covers(memo: Middleware, tool: str) -> bool:
    if not isinstance(memo, ResponseCachingMiddleware):
        return False
    try:
        settings = memo._call_tool_settings
        return settings.get("enabled") is not False and memo._matches_tool_cache_settings(tool_name=tool)
    except AttributeError:
        # Its settings moved in some FastMCP release: assume it covers the tool, the safe reading.
        return True


def memos_around(chain: list[Middleware], me: Middleware, tool: str) -> tuple[bool, bool]:
    """(a memo covering `tool` sits inside `me`, one sits outside `me`) in a middleware chain."""
    try:
        position = next(i for i, mw in enumerate(chain) if mw is me)
    except StopIteration:
        return False, False
    inside = any(_memo_covers(mw, tool) for mw in chain[position + 1 :])
    outside = any(_memo_covers(mw, tool) for mw in chain[:position])
    return inside, outside


def _read_answer(result: ToolResult) -> Answer | None:
    if getattr(result, "input_required", None) is not None:
        return None
    return Answer(
        content=result.content,
        structured_content=result.structured_content,
        is_error=result.is_error,
        meta=result.meta,  # what the tool and FastMCP put there; the tag covers it
    )


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

        memo_inside, memo_outside = memos_around(fctx.fastmcp.middleware, self, name) if fctx else (False, False)
        outcome = await self.revalidator.call(
            tool=name,
            arguments=context.message.arguments,
            request_meta=request_meta,
            run_body=lambda: call_next(context),
            read_answer=_read_answer,
            has_structured_output=has_structured_output,
            memo_inside=memo_inside,
            memo_outside=memo_outside,
        )
        match outcome:
            case PassThrough(result=result):
                return result
            case NotModified(reply=reply):
                return ToolResult(content=[], structured_content=reply.structured_content, meta=reply.meta)
            case Stamped(result=result, block=block):
                # model_copy, as FastMCP asks of middleware: it keeps the result's class and the protocol
                # object it may wrap (a proxied non-object structuredContent cannot pass ToolResult()).
                return result.model_copy(update={"meta": with_block(result.meta, block, self.meta_key)})
            case _:
                assert_never(outcome)


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
