"""What mypy must say about `ToolCache.wrap()` and the views it returns (checked by tests/test_typing.py).

Not run: mypy reads it. A line ending in `# error: <code>` must get exactly that error; every other line
must pass, `assert_type` included.
"""

from __future__ import annotations

from typing import Any, assert_type

import fastmcp
import mcp
from mcp import ClientSession
from mcp_types import CallToolResult

from mcpcache import ToolCache
from mcpcache.client import CachedCall, CachedMCPClient, CachedSession
from mcpcache.client.fastmcp import CachedFastMCPClient


async def one_view_per_client(cache: ToolCache, client: mcp.Client, session: ClientSession) -> None:
    assert_type(cache.wrap(client), CachedMCPClient)
    assert_type(cache.wrap(session, server_id="notebooks"), CachedSession)
    assert_type(await cache.wrap(client).call_tool("read", {"path": "a.ipynb"}), CallToolResult)
    assert_type(await cache.wrap(session).call("read", cache_mode="refresh"), CachedCall)


async def fastmcp_views(cache: ToolCache, client: fastmcp.Client[Any]) -> None:
    view = cache.wrap(client)
    assert_type(view, CachedFastMCPClient)
    await view.call_tool("read", {"path": "a.ipynb"}, cache_mode="bypass", raise_on_error=False)


async def mistakes(cache: ToolCache, client: mcp.Client, session: ClientSession) -> None:
    await cache.wrap(client).call_tool("read", {}, cache_mod="refresh")  # error: call-arg
    await cache.wrap(session).call_tool("read", {}, cache_mode="sometimes")  # error: arg-type
    cache.wrap("http://127.0.0.1:8765/mcp")  # error: call-overload
    await cache.invalidate("read", {"path": "a.ipynb"})  # error: call-arg
