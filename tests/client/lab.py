"""A server for the client-cache tests, on FastMCP or on the MCP SDK's `MCPServer`.

The catalogue (tests/fixture_servers/catalog.py) covers every return shape a tool author uses; these tests also
need what it does not have: a tool whose body waits for the test (single flight), tools annotated
read-only and mutating (freshness ending), tools that send change notifications, a tool that fails on
demand, and, on the SDK kind, a switchable hostile layer that rewrites replies on the wire the way a
buggy or malicious server would. It reads the catalogue's `DocStore`, so body runs are counted the same
way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import mcp_types as mt
from fastmcp import Context as FastMCPContext
from fastmcp import FastMCP
from fixture_servers.catalog import DocStore
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context as SDKContext
from mcp.server.mcpserver import MCPServer

from mcpcache.server.fastmcp import install
from mcpcache.server.policies import CachePolicy, ToolPolicies
from mcpcache.server.sdk import RevalidationExtension

ServerKind = Literal["fastmcp", "sdk"]
SERVER_KINDS: tuple[ServerKind, ...] = ("fastmcp", "sdk")
RESOURCE_URI = "docs://lab"

Rewrite = Callable[[dict[str, Any], dict[str, Any] | None], dict[str, Any]]
"""(the wire result the server would send, the request's `_meta`) -> the wire result to send instead."""

POLICIES = {
    "read": CachePolicy(ttl_ms=5000),
    "read_zero": CachePolicy(ttl_ms=0),
    "read_public": CachePolicy(ttl_ms=5000, scope="public"),
    "read_untagged": CachePolicy(ttl_ms=5000, etag=False),
    "gated": CachePolicy(ttl_ms=0),
    "flaky": CachePolicy(ttl_ms=1000),
}
READ_ONLY = mt.ToolAnnotations(read_only_hint=True)
ROWS = 1500
"""Rows in the answer to a key starting with "rows"."""
MUTATING = mt.ToolAnnotations(read_only_hint=False, destructive_hint=True)


@dataclass
class Lab:
    """The state the tests steer: the documents, the gate, the failure switch, the hostile rewrite."""

    docs: DocStore = field(default_factory=DocStore)
    gate: anyio.Event | None = None
    """When set, `gated` waits for it before answering."""
    entered: int = 0
    """How many `gated` bodies have started."""
    failing: bool = False
    """When true, `flaky` fails."""
    rewrite: Rewrite | None = None
    """SDK kind only: applied to every `tools/call` result on the wire."""
    seen_meta: list[dict[str, Any] | None] = field(default_factory=list)
    """SDK kind only: the `_meta` of every `tools/call` request, in order."""

    def runs(self, tool: str, key: str) -> int:
        return self.docs.runs_of(tool, key)


def _bodies(lab: Lab) -> list[Callable[..., Any]]:
    docs = lab.docs

    def answer(tool: str, key: str) -> dict[str, Any]:
        docs.ran(tool, key)
        out = {"kind": "doc", "key": key, "text": docs.text(key), "version": docs.version(key)}
        if key.startswith("rows"):  # an answer of many small values (a table's rows)
            out["rows"] = [{"id": i, "name": f"r{i}", "tags": ["a", "b"]} for i in range(ROWS)]
        return out

    def read(key: str) -> dict[str, Any]:
        return answer("read", key)

    def read_zero(key: str) -> dict[str, Any]:
        return answer("read_zero", key)

    def read_public(key: str) -> dict[str, Any]:
        return answer("read_public", key)

    def read_untagged(key: str) -> dict[str, Any]:
        return answer("read_untagged", key)

    async def gated(key: str) -> dict[str, Any]:
        lab.entered += 1
        if lab.gate is not None:
            await lab.gate.wait()
        return answer("gated", key)

    def flaky(key: str) -> dict[str, Any]:
        if lab.failing:
            docs.ran("flaky", key)
            raise RuntimeError(f"{key} is unavailable right now")
        return answer("flaky", key)

    return [read, read_zero, read_public, read_untagged, gated, flaky]


def _writers(lab: Lab) -> dict[str, tuple[Callable[..., Any], mt.ToolAnnotations | None]]:
    docs = lab.docs

    def peek(key: str) -> str:
        docs.ran("peek", key)
        return docs.text(key)

    def edit(key: str, text: str) -> str:
        docs.write(key, text)
        return "edited"

    def touch(key: str, text: str) -> str:
        docs.write(key, text)
        return "touched"

    return {"peek": (peek, READ_ONLY), "edit": (edit, MUTATING), "touch": (touch, None)}


def _hostile(lab: Lab) -> Callable[[ServerRequestContext[Any, Any], CallNext], Any]:
    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "tools/call" or not isinstance(result, dict):
            return result
        params = ctx.params if isinstance(ctx.params, dict) else {}
        meta = params.get("_meta")
        lab.seen_meta.append(dict(meta) if isinstance(meta, dict) else None)
        if lab.rewrite is None:
            return result
        return lab.rewrite(dict(result), meta if isinstance(meta, dict) else None)

    return middleware


def build_lab(kind: ServerKind, lab: Lab | None = None) -> FastMCP | MCPServer:
    lab = lab if lab is not None else Lab()
    policies = ToolPolicies(POLICIES)
    if kind == "fastmcp":
        server = FastMCP("lab-fastmcp")
        for fn in _bodies(lab):
            # Single flight shares only calls known to be reads: `gated` says so, like a real read tool would.
            server.tool(fn, annotations=READ_ONLY if fn.__name__ == "gated" else None)
        for fn, annotations in _writers(lab).values():
            server.tool(fn, annotations=annotations)

        @server.tool(annotations=READ_ONLY)
        async def announce(key: str, text: str, what: str, ctx: FastMCPContext) -> str:
            lab.docs.write(key, text)
            # FastMCP relates the notification to this request, so it reaches the client in every era.
            if what == "tools":
                await ctx.send_notification(mt.ToolListChangedNotification())
            else:
                params = mt.ResourceUpdatedNotificationParams(uri=RESOURCE_URI)
                await ctx.send_notification(mt.ResourceUpdatedNotification(params=params))
            return "announced"

        install(server, policies)
        return server

    sdk = MCPServer("lab-sdk", extensions=[RevalidationExtension(policies)], middleware=[_hostile(lab)])
    for fn in _bodies(lab):
        sdk.add_tool(fn, annotations=READ_ONLY if fn.__name__ == "gated" else None)
    for fn, annotations in _writers(lab).values():
        sdk.add_tool(fn, annotations=annotations)

    async def announce_sdk(key: str, text: str, what: str, ctx: SDKContext) -> str:
        lab.docs.write(key, text)
        # 2025-11-25: on the session's channel. 2026-07-28: on the subscription bus, which reaches the
        # client's `subscriptions/listen` stream (the session channel drops change notifications there).
        if what == "tools":
            await ctx.session.send_tool_list_changed()
            await ctx.notify_tools_changed()
        else:
            await ctx.session.send_resource_updated(RESOURCE_URI)
            await ctx.notify_resource_updated(RESOURCE_URI)
        return "announced"

    sdk.add_tool(announce_sdk, name="announce", annotations=READ_ONLY)
    return sdk
