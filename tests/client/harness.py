"""Connecting a cached view the way a user does, with every message of the connection counted.

`connect(view_kind, target, era, cache)` opens a stock client over a real transport (tests/support), with
`mcpcache.wire_count`'s counting transport underneath, and wraps it with `cache.wrap(...)`:
"mcp" wraps the `mcp.Client`, "session" its `ClientSession`, "fastmcp" a `fastmcp.Client`. `Conn.call`
returns the raw `mcp_types.CallToolResult` for every kind, so one assertion fits all three; the tests
of what each client's own `call_tool` returns (FastMCP's `.data`) call the view directly.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import mcp_types as mt
from stores.backends import FakeClock
from support.transports import Era, ServerTarget, StockClient, stock_client

from mcpcache.client import CachedCall, ToolCache
from mcpcache.protocol import META_KEY, NOT_MODIFIED_KEY
from mcpcache.wire_count import WireLog

ViewKind = Literal["mcp", "session", "fastmcp"]
VIEW_KINDS: tuple[ViewKind, ...] = ("mcp", "session", "fastmcp")

__all__ = ["VIEW_KINDS", "Conn", "FakeClock", "ViewKind", "connect", "live_clock"]


def live_clock() -> FakeClock:
    """A clock that starts now and moves only when told: for stores that judge expiry by their own
    clock (Redis), an entry stamped by this clock lives as long as the test says."""
    return FakeClock(time.time())


@dataclass
class Conn:
    kind: ViewKind
    client: StockClient
    view: Any
    log: WireLog

    async def call(self, name: str, arguments: dict[str, Any], **kwargs: Any) -> CachedCall:
        """A call through the cache; `result` is the `mcp_types.CallToolResult` whatever the client."""
        if self.kind == "fastmcp":
            call: CachedCall = await self.view.call_mcp(name, arguments, **kwargs)
        else:
            call = await self.view.call(name, arguments, **kwargs)
        return call

    async def direct(self, name: str, arguments: dict[str, Any]) -> mt.CallToolResult:
        """A call on the stock client itself, around the cache (as another piece of the app would)."""
        if self.kind == "fastmcp":
            result: mt.CallToolResult = await self.client.call_tool_mcp(name, arguments)
            return result
        return await self.client.call_tool(name, arguments)

    def mark(self) -> int:
        return self.log.mark()

    def tool_calls(self, since: int = 0) -> int:
        """`tools/call` requests this connection put on the wire since `since`."""
        return sum(1 for r in self.log.since(since) if r.direction == "sent" and r.method == "tools/call")


@contextlib.asynccontextmanager
async def connect(
    kind: ViewKind,
    target: ServerTarget,
    era: Era,
    cache: ToolCache,
    *,
    server_id: str | None = None,
    **client_kwargs: Any,
) -> AsyncIterator[Conn]:
    log = WireLog()
    stock_kind = "fastmcp" if kind == "fastmcp" else "mcp"
    async with stock_client(stock_kind, target, era, log=log, **client_kwargs) as client:
        wrapped = client.session if kind == "session" else client
        yield Conn(kind, client, cache.wrap(wrapped, server_id=server_id), log)


def plain(result: mt.CallToolResult) -> dict[str, Any]:
    """A result as data, without the `_meta` that legitimately differs between two copies of one answer."""
    data = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    data.pop("_meta", None)
    return data


def block(result: mt.CallToolResult) -> dict[str, Any] | None:
    value = (result.meta or {}).get(META_KEY)
    return dict(value) if isinstance(value, dict) else None


def assert_full_answer(result: mt.CallToolResult) -> None:
    """What a caller gets is never a not-modified reply."""
    cache_block = block(result)
    assert cache_block is None or NOT_MODIFIED_KEY not in cache_block, cache_block
    assert result.content, "a full answer has content"
