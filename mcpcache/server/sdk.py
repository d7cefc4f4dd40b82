"""MCP SDK adapter: an `Extension` for `mcp.server.mcpserver.MCPServer`.

The extension's `tools/call` interceptor sits at the handler layer, so it sees the tool's domain result
(a `CallToolResult`) and what it returns goes through the same per-era sieve as any handler result. It
also advertises `EXTENSION_ID` through the SDK's own capability mechanism.

    mcp = MCPServer("nb", extensions=[RevalidationExtension(policies)])

The SDK gives an extension no view of the server's tools (neither their `meta` nor `tools/list`), so
declarations are by name only, and `tools/list` is not annotated (docs/server.md). Told the server
afterwards (`extension.attach(mcp)`), it reads each tool's output schema from the server's own listing:
it then never sends a not-modified or delta reply whose stub `{"kind": K}` the schema refuses (the full
answer goes), and knows from the start which tools answer with structured content.

Delta replies (docs/server.md, "Delta replies") partition the history by the caller the SDK's bearer
auth verified: the HTTP request's authenticated user when the transport hands the request over, else
the SDK's own auth context (`get_access_token`), as its request-state binding reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, assert_never

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension
from mcp_types import CallToolRequestParams, CallToolResult

from mcpcache.protocol import EXTENSION_ID, META_KEY, extension_settings, with_block
from mcpcache.server.callers import partition_of
from mcpcache.server.decisions import Answer, BelowTagging, NotAnAnswer
from mcpcache.server.history import DEFAULT_HISTORY_BYTES, AnswerHistory, Partition
from mcpcache.server.policies import ToolPolicies
from mcpcache.server.revalidator import DeltaSent, NotModified, PassThrough, Revalidator, ServerStats, Stamped
from mcpcache.server.stubs import StubCheck, StubChecks

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["RevalidationExtension"]

logger = logging.getLogger("mcpcache.server")

_ATTACH_HINT = "call extension.attach(server) once the MCPServer is made"


@dataclass(frozen=True)
class _SDKCall:
    """One `tools/call` of a declared tool, as the driver sees it (`mcpcache.server.revalidator.ToolCall`).

    The SDK hands an extension neither the tool's output schema (the extension reads it from the server
    it was attached to, if any) nor a way to tag below the handler, and no response memo sits under it."""

    extension: RevalidationExtension
    params: CallToolRequestParams
    ctx: ServerRequestContext[Any, Any]
    call_next: CallNext
    memo_inside: bool = False
    memo_outside: bool = False
    tags_below: bool = False
    policy: None = None
    _schema: list[Mapping[str, Any] | None] = field(default_factory=list)
    """The tool's output schema, once read from the attached server's listing in this call."""

    async def _output_schema(self) -> Mapping[str, Any] | None:
        if not self._schema:
            self._schema.append(await self.extension.output_schema(self.tool))
        return self._schema[0]

    @property
    def tool(self) -> str:
        return self.params.name

    @property
    def arguments(self) -> dict[str, Any] | None:
        return self.params.arguments

    @property
    def request_meta(self) -> object:
        return self.params.meta

    @property
    def partition(self) -> Partition:
        scope = getattr(self.ctx.request, "scope", None)
        user = scope.get("user") if isinstance(scope, Mapping) else None
        if isinstance(user, AuthenticatedUser):
            return partition_of(user.access_token)
        return partition_of(get_access_token())

    async def run_body(self) -> HandlerResult:
        return await self.call_next(self.ctx)

    async def run_body_tagged(self, tagging: BelowTagging) -> HandlerResult:
        return await self.run_body()

    def read_answer(self, result: HandlerResult) -> Answer | NotAnAnswer:
        if not isinstance(result, CallToolResult):
            return NotAnAnswer("not a tool answer (e.g. input required)")
        return Answer(
            content=result.content,
            structured_content=result.structured_content,
            is_error=result.is_error,
            meta=result.meta,  # what the tool and MCPServer put there; the tag covers it
        )

    async def has_structured_output(self) -> bool | None:
        # A tool with an output schema answers with structured content; one without may still (a returned
        # CallToolResult), so only the first is known before the body runs.
        return True if await self._output_schema() is not None else None

    async def stub_check(self) -> StubCheck:
        if self.extension.server is None:
            return StubCheck.unknown(_ATTACH_HINT)
        return self.extension.stubs.get(self.tool, await self._output_schema())


class RevalidationExtension(Extension):
    """Stamps the answers of the tools `policies` declares, answers not-modified to current tags and with
    the change only to older tags it still holds the answer of. `delta_history_bytes` bounds the memory
    kept for those deltas (64 MiB by default; 0 keeps nothing and sends no deltas). `meter_provider`: the
    OpenTelemetry meter provider it counts on (None: the global one, once the application sets it)."""

    identifier = EXTENSION_ID

    def __init__(
        self,
        policies: ToolPolicies | Mapping[str, Any],
        *,
        meta_key: str = META_KEY,
        delta_history_bytes: int = DEFAULT_HISTORY_BYTES,
        meter_provider: Any | None = None,
    ) -> None:
        if not isinstance(policies, ToolPolicies):
            policies = ToolPolicies(policies)
        self.revalidator = Revalidator(
            policies, meta_key=meta_key, delta_history_bytes=delta_history_bytes, meter_provider=meter_provider
        )
        self.meta_key = meta_key
        self.server: MCPServer[Any] | None = None
        """The server whose tools' output schemas the extension reads (`attach`)."""
        self.stubs = StubChecks()

    def attach(self, server: MCPServer[Any]) -> MCPServer[Any]:
        """Let the extension read `server`'s tools (the server it was handed to): their output schemas
        decide whether a not-modified reply's stub `{"kind": K}` may be sent. Returns `server`.

        Without it, the extension cannot see the schemas: stubs go unchecked (a warning names each tool
        the first time), and the first body-skipping reply per tool waits for one run of the body."""
        self.server = server
        return server

    async def output_schema(self, tool: str) -> Mapping[str, Any] | None:
        """`tool`'s output schema as the attached server lists it (None: none, or no server attached)."""
        if self.server is None:
            return None
        for listed in await self.server.list_tools():
            if listed.name == tool:
                return listed.output_schema
        return None

    @property
    def stats(self) -> ServerStats:
        """The counters of this extension (live; `stats.snapshot()` for a copy)."""
        return self.revalidator.stats

    @property
    def history(self) -> AnswerHistory | None:
        """The answers sent with tags, kept for delta replies (`history.snapshot()`: its size now)."""
        return self.revalidator.history

    def settings(self) -> dict[str, Any]:
        return extension_settings(self.meta_key, delta_formats=self.revalidator.delta_formats)

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if params.name not in self.revalidator.policies:
            return await call_next(ctx)
        outcome = await self.revalidator.run(_SDKCall(self, params, ctx, call_next))
        match outcome:
            case PassThrough(result=result):
                return result
            case NotModified(reply=reply) | DeltaSent(reply=reply):
                return CallToolResult(content=[], structured_content=reply.structured_content, _meta=reply.meta)
            case Stamped(result=result, block=block):
                assert isinstance(result, CallToolResult)  # read_answer let nothing else through
                return result.model_copy(update={"meta": with_block(result.meta, block, self.meta_key)})
            case _:
                assert_never(outcome)
