"""The FastMCP middleware: stamps declared tools' answers, answers not-modified, and lists each declared
tool's declaration in `tools/list`; `install` puts it first in the chain with the raw-value transform and
advertises the extension (the package docstring says how the pieces fit)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, assert_never

import mcp_types as mt
from fastmcp.server.dependencies import get_access_token
from fastmcp.server.extensions import ServerExtension
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.server.providers.aggregate import AggregateProvider
from fastmcp.tools.base import Tool, ToolResult

from mcpcache.protocol import EXTENSION_ID, META_KEY, extension_settings, with_block
from mcpcache.server.callers import partition_of
from mcpcache.server.decisions import Answer, BelowTagging, NotAnAnswer
from mcpcache.server.fastmcp.answers import read_tool_answer
from mcpcache.server.fastmcp.chain import CLAIM, Claim, inside_is_transparent, memos_around
from mcpcache.server.fastmcp.declarations import ToolDeclarations, Unresolved
from mcpcache.server.fastmcp.raw_tags import HANDOFF, Handoff, RawTagTransform, raw_tagged_class
from mcpcache.server.history import DEFAULT_HISTORY_BYTES, UNKNOWN, AnswerHistory, Partition
from mcpcache.server.policies import CachePolicy, ToolPolicies, Validator
from mcpcache.server.revalidator import DeltaSent, NotModified, PassThrough, Revalidator, ServerStats, Stamped
from mcpcache.server.stubs import StubCheck, StubChecks

if TYPE_CHECKING:
    from fastmcp import FastMCP

__all__ = ["RevalidationCapability", "RevalidationMiddleware", "install"]

logger = logging.getLogger("mcpcache.server")


# The middleware ------------------------------------------------------------------------------------


class RevalidationMiddleware(Middleware):
    """Stamps `_meta[META_KEY]` on the answers of declared tools; answers not-modified to matching tags,
    and with the change only to older tags it still holds the answer of (delta replies); puts each
    declared tool's declaration block in its `tools/list` entry.

    `stats` counts what it did (`ServerStats`); `history` holds the answers sent with tags (None when
    `delta_history_bytes=0`).
    """

    def __init__(
        self,
        policies: ToolPolicies | Mapping[str, CachePolicy] | None = None,
        *,
        validators: Mapping[str, Validator] | None = None,
        meta_key: str = META_KEY,
        delta_history_bytes: int = DEFAULT_HISTORY_BYTES,
        meter_provider: Any | None = None,
    ) -> None:
        if not isinstance(policies, ToolPolicies):
            policies = ToolPolicies(policies)
        self.declarations = ToolDeclarations(policies, validators, meta_key=meta_key)
        self.revalidator = Revalidator(
            policies, meta_key=meta_key, delta_history_bytes=delta_history_bytes, meter_provider=meter_provider
        )
        self.meta_key = meta_key
        self.stubs = StubChecks()
        """Whether each tool's output schema accepts the stub of a not-modified reply, per schema."""
        self._checked = False

    @property
    def stats(self) -> ServerStats:
        """The counters of this middleware (live; `stats.snapshot()` for a copy)."""
        return self.revalidator.stats

    @property
    def history(self) -> AnswerHistory | None:
        """The answers sent with tags, kept for delta replies (`history.snapshot()`: its size now)."""
        return self.revalidator.history

    async def check_declarations(self, server: FastMCP) -> None:
        """Warn about declarations that match no tool of `server` (done once, at its first `tools/list`).

        The tools are listed below the server's own auth and visibility filters (a tool this caller may
        not see is still a tool), through the public provider listing FastMCP's `list_tools` builds on.
        """
        self._checked = True
        try:
            tools = await AggregateProvider.list_tools(server)
        except Exception:
            logger.debug("could not list the tools of %r to check the cache declarations", server.name, exc_info=True)
            return
        self.declarations.check(tools, server.name)

    async def on_list_tools(
        self,
        context: MiddlewareContext[mt.ListToolsRequest],
        call_next: CallNext[mt.ListToolsRequest, Sequence[Tool]],
    ) -> Sequence[Tool]:
        tools = await call_next(context)
        fctx = context.fastmcp_context
        if not self._checked and fctx is not None:
            await self.check_declarations(fctx.fastmcp)
        listed: list[Tool] = []
        for tool in tools:
            policy = self.declarations.for_tool(tool)
            meta = tool.meta or {}
            block = policy.declaration_block() if policy is not None else None
            if block is None or meta.get(self.meta_key) == block:
                listed.append(tool)
            else:
                # A copy: the tool object itself is FastMCP's (and the user's) and must not change.
                listed.append(tool.model_copy(update={"meta": {**meta, self.meta_key: block}}))
        return listed

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        name = context.message.name
        fctx = context.fastmcp_context
        found = self.declarations.lookup(name)
        if isinstance(found, Unresolved):
            tool = await fctx.fastmcp.get_tool(name) if fctx is not None else None
            found = self.declarations.for_tool(tool) if tool is not None else None
        policy = found
        if policy is None:
            return await call_next(context)
        outer = CLAIM.get()
        result = await self._revalidate(name, policy, context, call_next)
        if outer is not None:
            outer.inner_result = result
        return result

    async def _revalidate(
        self,
        name: str,
        policy: CachePolicy,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        outcome = await self.revalidator.run(_FastMCPCall(self, name, policy, context, call_next))
        match outcome:
            case PassThrough(result=result):
                return result
            case NotModified(reply=reply) | DeltaSent(reply=reply):
                return ToolResult(content=[], structured_content=reply.structured_content, meta=reply.meta)
            case Stamped(result=result, block=block):
                # model_copy, as FastMCP asks of middleware: it keeps the result's class and the protocol
                # object it may wrap (a proxied non-object structuredContent cannot pass ToolResult()).
                return result.model_copy(update={"meta": with_block(result.meta, block, self.meta_key)})
            case _:
                assert_never(outcome)


@dataclass
class _FastMCPCall:
    """One call of a declared tool as the driver sees it (`mcpcache.server.revalidator.ToolCall`)."""

    middleware: RevalidationMiddleware
    tool: str
    policy: CachePolicy
    context: MiddlewareContext[mt.CallToolRequestParams]
    call_next: CallNext[mt.CallToolRequestParams, ToolResult]
    claim: Claim = field(default_factory=Claim)
    memo_inside: bool = False
    memo_outside: bool = False
    tags_below: bool = False
    _found: list[Tool | None] = field(default_factory=list)
    """The tool as this call's server hands it out, once looked up (the schema, the tagging check)."""

    def __post_init__(self) -> None:
        fctx = self.context.fastmcp_context
        if fctx is not None:
            self.memo_inside, self.memo_outside = memos_around(fctx.fastmcp.middleware, self.middleware, self.tool)
            self.tags_below = not self.memo_inside and inside_is_transparent(fctx.fastmcp, self.middleware)

    @property
    def arguments(self) -> dict[str, Any] | None:
        return self.context.message.arguments

    @property
    def partition(self) -> Partition:
        # FastMCP's own reading of the verified token: the HTTP request's user first (fresh after a
        # token refresh on a long-lived session), then the SDK's auth context.
        try:
            token = get_access_token()
        except TypeError:  # a token FastMCP could not convert: whoever it is, it is nobody else's history
            logger.debug("tool %r: the access token could not be read; nothing kept for deltas", self.tool)
            return UNKNOWN
        return partition_of(token)

    @property
    def request_meta(self) -> object:
        # context.message.meta is rebuilt by FastMCP and never holds the wire _meta; the request's does.
        fctx = self.context.fastmcp_context
        request_context = fctx.request_context if fctx is not None else None
        return request_context.meta if request_context is not None else None

    async def _tool(self) -> Tool | None:
        if not self._found:
            fctx = self.context.fastmcp_context
            self._found.append(await fctx.fastmcp.get_tool(self.tool) if fctx is not None else None)
        return self._found[0]

    async def has_structured_output(self) -> bool | None:
        tool = await self._tool()
        return None if tool is None else tool.output_schema is not None

    async def stub_check(self) -> StubCheck:
        tool = await self._tool()
        if tool is None:
            return StubCheck.unknown("the tool was not found through the FastMCP server of the call")
        return self.middleware.stubs.get(self.tool, tool.output_schema)

    async def run_body(self) -> ToolResult:
        token = CLAIM.set(self.claim)
        try:
            return await self.call_next(self.context)
        finally:
            CLAIM.reset(token)

    async def run_body_tagged(self, tagging: BelowTagging) -> ToolResult:
        if type(await self._tool()) is not raw_tagged_class():
            # A transform added after install() wraps the tagged tool (same name, its own answer): the raw
            # value is not what is sent, so the answer is hashed.
            tagging.reason = "the tool that runs is not the one mcpcache tags below; the answer is hashed"
            return await self.run_body()
        token = HANDOFF.set(Handoff(tagging))
        try:
            return await self.run_body()
        finally:
            HANDOFF.reset(token)

    def read_answer(self, result: ToolResult) -> Answer | NotAnAnswer:
        if self.claim.inner_result is not None and self.claim.inner_result is result:
            return NotAnAnswer("answered by the mcpcache middleware of the mounted server that defines the tool")
        return read_tool_answer(result)


class RevalidationCapability(ServerExtension):
    """Advertises `EXTENSION_ID` on protocol 2026-07-28; the middleware does the work."""

    identifier = EXTENSION_ID

    def __init__(self, meta_key: str = META_KEY, *, delta_formats: Sequence[str] = ()) -> None:
        self._settings = extension_settings(meta_key, delta_formats=delta_formats)

    def settings(self) -> dict[str, Any]:
        return dict(self._settings)


def install(
    server: FastMCP,
    policies: ToolPolicies | Mapping[str, CachePolicy] | None = None,
    *,
    validators: Mapping[str, Validator] | None = None,
    meta_key: str = META_KEY,
    raw_tags: bool = True,
    delta_history_bytes: int = DEFAULT_HISTORY_BYTES,
    meter_provider: Any | None = None,
) -> RevalidationMiddleware:
    """Add the middleware as the outermost one, the raw-value tag transform, and advertise the extension.

    Tools declare themselves in their own meta (`@mcp.tool(meta=cache_meta(ttl_ms=5000))`); `policies`
    declares tools by name instead (or as well; a name declared there wins over the tool's meta), and
    `validators` gives tools, by name, the function that names the version of what they read.
    Returns the middleware (its `stats` count what it did). `raw_tags=False` leaves the transform out
    (every tag is then a content tag). `delta_history_bytes` bounds the memory kept for delta replies
    (64 MiB by default; 0 keeps nothing and sends no deltas). `meter_provider`: the OpenTelemetry meter
    provider the middleware counts on (None: the global one, once the application sets it).
    """
    middleware = RevalidationMiddleware(
        policies,
        validators=validators,
        meta_key=meta_key,
        delta_history_bytes=delta_history_bytes,
        meter_provider=meter_provider,
    )
    server.middleware.insert(0, middleware)
    if raw_tags:
        server.add_transform(RawTagTransform(middleware.declarations))
    server.add_extension(RevalidationCapability(meta_key, delta_formats=middleware.revalidator.delta_formats))
    return middleware
