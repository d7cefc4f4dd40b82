"""One host `tools/call`, answered through the tool cache (and, with references on, as the model's view).

`UpstreamCall` is the `Connection` the cache's driver (`ToolCache.execute`) does its I/O through, for one
host request: the call goes out on the proxy's upstream session with the host's progress relayed under
the host's own token. `CachingMiddleware` takes every `tools/call` (and, with references, `tools/list`)
on its way through the FastMCP proxy; everything else passes through FastMCP's proxy untouched.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import mcp_types as mt
from fastmcp.server.context import Context
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.server.providers.proxy import _stash_proxy_request_context
from fastmcp.tools.base import InputRequiredToolResult, RawStructuredToolResult, Tool, ToolResult
from mcp.shared.dispatcher import ProgressFnT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from mcpcache.client.cache import ToolCache
from mcpcache.client.policy import NO_CACHE_BLOCK, CacheMode
from mcpcache.client.wrappers import CachedCall
from mcpcache.proxy.link import UpstreamLink
from mcpcache.proxy.settings import PROGRESS_TOKEN, forwarded_meta, model_result, passes_whole
from mcpcache.refs import References, call_for_model, with_uri_arguments

logger = logging.getLogger("mcpcache.proxy")

Progress = ProgressFnT


class InputRequired(Exception):
    """The upstream asked the host for input (protocol 2026-07-28); the host gets the request as is."""

    def __init__(self, result: mt.InputRequiredResult) -> None:
        super().__init__("the upstream asked for input")
        self.result = result


def progress_relay(ctx: Context) -> Progress | None:
    """Relays the upstream's progress to the host under the host's own token, or None if the host asked for
    no progress. The session and request id are taken now: the relay runs in the upstream client's receive
    loop, where the request's context variables are not this request's."""
    request = ctx.request_context
    token = (request.meta or {}).get(PROGRESS_TOKEN) if request is not None else None
    if token is None:
        return None
    session, request_id = ctx.session, ctx.request_id

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        await session.send_progress_notification(
            progress_token=token, progress=progress, total=total, message=message, related_request_id=request_id
        )

    return relay


class UpstreamCall:
    """`mcpcache.client.contracts.Connection` over the proxy's upstream session, for one host request."""

    def __init__(self, link: UpstreamLink, progress: Progress | None, *, host_is_modern: bool) -> None:
        self._link = link
        self._progress = progress
        self._host_is_modern = host_is_modern
        self.server_id = link.server_id
        self.era = link.client.session.protocol_version or "unknown"
        self.timeout_s: float | None = None

    async def send(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None, timeout_s: float | None
    ) -> mt.CallToolResult | None:
        # The proxy's session never checks answers against output schemas (FastMCP's forwarding session):
        # the host checks them for itself, and a not-modified reply need not fit them.
        answer = await self._link.client.session.call_tool(
            name,
            arguments,
            timeout_s,
            self._progress,
            meta=meta,  # type: ignore[arg-type]
            allow_input_required=True,
        )
        if isinstance(answer, mt.InputRequiredResult):
            if self._host_is_modern:
                raise InputRequired(answer)
            # A host on the handshake era cannot take the request as a result: the client's own path asks it
            # through sampling/elicitation requests relayed to the host, and returns the final answer.
            return None
        return answer

    async def send_plain(self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None) -> mt.CallToolResult:
        return await self._link.client.call_tool_mcp(name, arguments, progress_handler=self._progress, meta=meta)

    async def validate(self, name: str, result: mt.CallToolResult) -> None:
        """Nothing: the host validates what it receives, exactly as it would have without the proxy."""

    async def read_only(self, name: str) -> bool | None:
        return await self._link.read_only(name)

    async def idempotent(self, name: str) -> bool | None:
        return await self._link.idempotent(name)

    async def declarations(self) -> Mapping[str, Any] | None:
        return await self._link.declarations()


class UpstreamCaller:
    """What `call_for_model` calls through (`mcpcache.refs.calls.RawCaller`), keeping the raw answer."""

    def __init__(self, cache: ToolCache, conn: UpstreamCall, meta: dict[str, Any] | None) -> None:
        self._cache = cache
        self._conn = conn
        self._meta = meta
        self.server_id = conn.server_id
        self.result: mt.CallToolResult | None = None

    async def call_raw(
        self, name: str, arguments: dict[str, Any] | None = None, *, cache_mode: CacheMode = "use"
    ) -> CachedCall:
        result, outcome = await self._cache.execute(self._conn, name, arguments, mode=cache_mode, meta=self._meta)
        log_outcome(name, outcome.status, outcome.reason)
        self.result = result
        return CachedCall(result, outcome)


_told_of_the_gateway = False


def log_outcome(name: str, status: str, reason: str) -> None:
    logger.info("%s: %s (%s)", name, status, reason)
    global _told_of_the_gateway
    if NO_CACHE_BLOCK in reason and not _told_of_the_gateway:
        _told_of_the_gateway = True  # once per process: the line is advice, the per-call lines are the record
        logger.info(
            "the upstream stamps none of its answers, so the proxy stores none of them; to cache a server that "
            "cannot be changed, run `mcpcache gateway` in front of it (it stamps the tools you declare; "
            "docs/gateway.md) and point the proxy at the gateway"
        )


class RelayedToolResult(ToolResult):
    """An answer FastMCP sends on as it came: content, structured content, `_meta` and isError untouched.

    `ToolResult.from_mcp_result` would serialize the structured content to JSON and parse it back (to check
    it can be sent): about 50 ms for a 5 MB notebook, on every read, for an answer that arrived as JSON.
    This skips that step, as FastMCP's own `InputRequiredToolResult` does.
    """

    def __init__(self, result: mt.CallToolResult) -> None:
        BaseModel.__init__(
            self,
            content=result.content,
            structured_content=result.structured_content,
            meta=result.meta,
            is_error=result.is_error,
        )


def as_tool_result(result: mt.CallToolResult) -> ToolResult:
    """FastMCP's form of `result`, which it sends to the host with every field as it is here."""
    structured = result.structured_content
    if structured is not None and not isinstance(structured, dict):
        # Protocol 2026-07-28 allows any JSON value; ToolResult takes objects only.
        return RawStructuredToolResult(result.content, structured, result.meta, result.is_error)
    return RelayedToolResult(result)


def listed_for_model(tool: Tool) -> Tool:
    """A tool as a model with references sees it: `X_uri` beside every object or array argument, and no
    output schema (its results are views, whose markers would not fit it)."""
    return tool.model_copy(update={"parameters": with_uri_arguments(tool.parameters), "output_schema": None})


class CachingMiddleware(Middleware):
    """Answers every `tools/call` through the cache; with references, shows the model views and schemas
    it can pass references through. Never calls the next handler for a tool call: the upstream is
    reached through the cache only."""

    def __init__(self, link: UpstreamLink, references: References | None) -> None:
        self.link = link
        self.cache = link.cache
        self.references = references

    async def on_request(self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]) -> Any:
        # Every host request is served on the upstream session of its era and declared capabilities.
        ctx = context.fastmcp_context
        if ctx is not None and context.method != "initialize":
            await self.link.use(ctx)
        return await call_next(context)

    async def on_list_tools(
        self, context: MiddlewareContext[mt.ListToolsRequest], call_next: CallNext[mt.ListToolsRequest, Sequence[Tool]]
    ) -> Sequence[Tool]:
        tools = await call_next(context)
        if self.references is None:
            return tools
        return [listed_for_model(tool) for tool in tools]

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        ctx = context.fastmcp_context
        if ctx is None:  # pragma: no cover - FastMCP always passes its context to tool calls
            return await call_next(context)
        # Private (fastmcp 4.2.3): tells the upstream client's relays (logging, sampling, elicitation, roots)
        # which host request to answer through, as FastMCP's own proxied tools do before every call
        # (tests/proxy/test_private_apis.py fails if it moves).
        _stash_proxy_request_context(self.link.client, ctx)
        name = context.message.name
        arguments = dict(context.message.arguments or {})
        request = ctx.request_context
        host_meta = forwarded_meta(request.meta if request is not None else None, self.cache.meta_key)
        if ctx.input_responses is not None or ctx.request_state is not None:
            # A continuation answers one exchange of a multi-round-trip call: never cached, sent as it came.
            return await self._continue(ctx, name, arguments, host_meta)
        host_is_modern = request is not None and request.protocol_version in MODERN_PROTOCOL_VERSIONS
        conn = UpstreamCall(self.link, progress_relay(ctx), host_is_modern=host_is_modern)
        try:
            if self.references is None:
                result, outcome = await self.cache.execute(conn, name, arguments, meta=host_meta)
                log_outcome(name, outcome.status, outcome.reason)
                return as_tool_result(result)
            return await self._for_model(conn, name, arguments, host_meta)
        except InputRequired as asked:
            return InputRequiredToolResult(asked.result)

    async def _for_model(
        self, conn: UpstreamCall, name: str, arguments: dict[str, Any], host_meta: dict[str, Any] | None
    ) -> ToolResult:
        assert self.references is not None
        caller = UpstreamCaller(self.cache, conn, host_meta)
        called = await call_for_model(caller, name, arguments, references=self.references)
        if not called.called:
            logger.info("%s: not called (%s)", name, called.envelope.get("error", ""))
            text = json.dumps(called.envelope, ensure_ascii=False)
            return as_tool_result(model_result(called.envelope, text, None, is_error=True))
        raw = caller.result
        assert raw is not None
        view = called.view
        if view is None or view.uri is None or passes_whole(raw):
            return as_tool_result(raw)  # small enough to show whole, or not for a JSON view: as upstream sent it
        text = dataclasses.replace(view, envelope=called.envelope).text()
        return as_tool_result(model_result(called.envelope, text, raw.meta, is_error=False))

    async def _continue(
        self, ctx: Context, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None
    ) -> ToolResult:
        answer = await self.link.client.session.call_tool(
            name,
            arguments,
            None,
            progress_relay(ctx),
            input_responses=ctx.input_responses,
            request_state=ctx.request_state,
            meta=meta,  # type: ignore[arg-type]
            allow_input_required=True,
        )
        if isinstance(answer, mt.InputRequiredResult):
            return InputRequiredToolResult(answer)
        log_outcome(name, "bypass", "a multi-round-trip continuation is never cached")
        return as_tool_result(answer)
