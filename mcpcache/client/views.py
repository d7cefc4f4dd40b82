"""Which caching view wraps which client: `ToolCache.wrap` hands each supported client type its view.

`mcp.Client` and `mcp.ClientSession` get the views of `mcpcache.client.wrappers`; `fastmcp.Client` gets
`mcpcache.client.fastmcp`'s, imported only when such a client is wrapped (the SDK path must not need
FastMCP). A view also guards the streamable HTTP transport of each session it calls through
(`transport_guard`, with the session's notification hook in `wrappers`).
"""

from __future__ import annotations

from typing import Any

from mcp import Client as MCPClient
from mcp import ClientSession

from mcpcache.client.contracts import ViewCache
from mcpcache.client.wrappers import CachedMCPClient, CachedSession, _CachedView

__all__ = ["view_of"]


def view_of(cache: ViewCache, client: Any, server_id: str | None) -> _CachedView:
    """A caching view of `client` over `cache` (TypeError for a client it cannot wrap)."""
    view = _view_of(cache, client, server_id)
    view._hook_if_connected()
    return view


def _view_of(cache: ViewCache, client: Any, server_id: str | None) -> _CachedView:
    if isinstance(client, MCPClient):
        return CachedMCPClient(cache, client, server_id)
    if isinstance(client, ClientSession):
        return CachedSession(cache, client, server_id)
    try:
        from fastmcp import Client as FastMCPClient
    except ImportError:  # pragma: no cover - fastmcp is a dependency, but the SDK path must not need it
        FastMCPClient = None  # type: ignore[assignment,misc]
    if FastMCPClient is not None and isinstance(client, FastMCPClient):
        from mcpcache.client.fastmcp import CachedFastMCPClient

        return CachedFastMCPClient(cache, client, server_id)
    raise TypeError(f"cannot wrap a {type(client).__name__}: expected mcp.Client, mcp.ClientSession or fastmcp.Client")
