"""Client and server report the same bytes saved for a FastMCP not-modified reply whatever the tool returns.

The raw-value path answers without converting the return value (`conversion_skipped`); it measured the answer
it did not build only for a dict under an annotation FastMCP serialises by inference, so a list (wrapped) or a
TypedDict counted 0 bytes on the server while the client counted the answer. Real FastMCP
server, real `ToolCache` over a stock MCP client, memory streams.
"""

from __future__ import annotations

from typing import Any

import mcp_types as mt
import pytest
from fastmcp import FastMCP
from fastmcp.tools.base import ToolResult
from stores.backends import FakeClock
from support.transports import MODERN, ServerTarget, stock_client
from typing_extensions import TypedDict

from mcpcache.client import ToolCache
from mcpcache.server import cache_meta
from mcpcache.server.fastmcp import install
from mcpcache.stores import MemoryStore

pytestmark = pytest.mark.anyio

TEXT = 'é😀 "quoted" back\\slash \x01 \u2028 ' * 20
NUMBERS = [1e16, 0.1, 1.0, -0.0, 1e-7, 123456789.125] * 10


class Doc(TypedDict, total=False):  # nothing required: the stub passes its schema
    kind: str
    text: str
    numbers: list[float]


def _server(shape: str) -> FastMCP:
    server = FastMCP("s")
    meta = cache_meta(ttl_ms=1000)
    if shape == "dict":

        @server.tool(name="t", meta=meta)
        def as_dict() -> dict[str, Any]:
            return {"kind": "doc", "text": TEXT, "numbers": NUMBERS}

    elif shape == "list":

        @server.tool(name="t", meta=meta)
        def as_list() -> list[Any]:
            return [TEXT, NUMBERS, {"a": None}]

    elif shape == "typeddict":

        @server.tool(name="t", meta=meta)
        def as_typed() -> Doc:
            return {"kind": "doc", "text": TEXT, "numbers": NUMBERS}

    else:

        @server.tool(name="t", meta=meta)
        def as_result() -> ToolResult:
            return ToolResult(
                content=[mt.TextContent(type="text", text=TEXT)],
                structured_content={"kind": "doc", "numbers": NUMBERS},
                meta={"own": {"é": "ü", "n": 1e16}},
            )

    return server


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "hashed"])
@pytest.mark.parametrize("shape", ["dict", "list", "typeddict", "toolresult"])
async def test_client_and_server_agree_on_bytes_saved(shape: str, raw: bool) -> None:
    server = _server(shape)
    stats = install(server, raw_tags=raw).stats
    clock = FakeClock()
    cache = ToolCache(MemoryStore(clock=clock), clock=clock)
    async with stock_client("mcp", ServerTarget.memory(server), MODERN) as client:
        view = cache.wrap(client, server_id="s")
        await view.call("t", {})
        outcomes = []
        for _ in range(2):  # the second match is measured from the sizes kept, not again
            clock.advance(2)
            outcomes.append((await view.call("t", {})).outcome)
    assert [o.status for o in outcomes] == ["revalidated", "revalidated"]
    assert outcomes[0].bytes_saved > len(TEXT)
    assert stats.not_modified == 2
    assert stats.bytes_saved == outcomes[0].bytes_saved + outcomes[1].bytes_saved
