"""A caching view of `fastmcp.Client`.

FastMCP turns a raw result into `.data` only after the call; the view swaps a stored answer in before
that step, so `.data` is always parsed from a full answer and never from a not-modified reply's
`{"kind": ...}` (which FastMCP would otherwise turn into a partial object without complaint).
"""

from __future__ import annotations

from typing import Any

import mcp_types as mt
from fastmcp import Client as FastMCPClient
from fastmcp.client.client import CallToolResult as FastMCPCallToolResult
from fastmcp.client.transports import FastMCPTransport, SSETransport, StdioTransport, StreamableHttpTransport
from mcp import ClientSession

from mcpcache.client.contracts import ViewCache
from mcpcache.client.identity import connection_server_id, stdio_server_id, url_server_id
from mcpcache.client.policy import CacheMode
from mcpcache.client.wrappers import CachedCall, _CachedView, request_options


class CachedFastMCPClient(_CachedView):
    def __init__(self, cache: ViewCache, client: FastMCPClient[Any], server_id: str | None = None) -> None:
        super().__init__(cache, client, server_id)
        self._client = client

    @property
    def session(self) -> ClientSession:
        return self._client.session

    def _derive_server_id(self) -> str:
        transport = self._client.transport
        if isinstance(transport, StreamableHttpTransport | SSETransport):
            return url_server_id(str(transport.url))
        if isinstance(transport, StdioTransport):
            return stdio_server_id(transport.command, transport.args, transport.cwd, transport.env)
        if isinstance(transport, FastMCPTransport):
            # One identity per server object in this process: two servers may share a name.
            return connection_server_id(transport.server, "in-process FastMCP server")
        return connection_server_id(self.session, "fastmcp.Client")

    async def call_mcp(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        progress_handler: Any = None,
        timeout: Any = None,  # noqa: ASYNC109 - the same signature as fastmcp.Client
        meta: dict[str, Any] | None = None,
        *,
        version: str | None = None,
        cache_mode: CacheMode = "use",
    ) -> CachedCall:
        """The raw `mcp_types.CallToolResult` and the cache's outcome."""
        variant = f"version={version}" if version is not None else ""
        fresh = self._fresh(name, arguments, cache_mode, variant)
        if type(fresh) is CachedCall:  # not isinstance: a fresh hit is the hot path
            return fresh
        request_meta = dict(meta) if meta else {}
        if version is not None:
            request_meta["fastmcp"] = {**request_meta.get("fastmcp", {}), "version": version}

        async def send_plain(n: str, args: dict[str, Any], m: dict[str, Any] | None) -> mt.CallToolResult:
            return await self._client.call_tool_mcp(n, args, progress_handler=progress_handler, timeout=timeout, meta=m)

        from fastmcp.utilities.timeout import normalize_timeout_to_seconds

        # Private: the client-wide handler that fastmcp.Client's own call_tool_mcp falls back to; cached calls
        # go out on the session, so the view must apply the same fallback (tests/client/test_private_apis.py).
        progress = progress_handler or getattr(self._client, "_progress_handler", None)
        options = request_options(normalize_timeout_to_seconds(timeout), progress)
        result, outcome = await self._execute(
            name,
            arguments,
            mode=cache_mode,
            meta=request_meta or None,
            send_plain=send_plain,
            request_options=options,
            variant=variant,
            named=fresh,
        )
        return CachedCall(result, outcome)

    async def call_raw(
        self, name: str, arguments: dict[str, Any] | None = None, *, cache_mode: CacheMode = "use"
    ) -> CachedCall:
        return await self.call_mcp(name, arguments, cache_mode=cache_mode)

    async def call_tool_mcp(
        self,
        name: str,
        arguments: dict[str, Any],
        progress_handler: Any = None,
        timeout: Any = None,  # noqa: ASYNC109 - the same signature as fastmcp.Client
        meta: dict[str, Any] | None = None,
        *,
        cache_mode: CacheMode = "use",
    ) -> mt.CallToolResult:
        call = await self.call_mcp(name, arguments, progress_handler, timeout, meta, cache_mode=cache_mode)
        result: mt.CallToolResult = call.result
        return result

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        version: str | None = None,
        timeout: Any = None,  # noqa: ASYNC109 - the same signature as fastmcp.Client
        progress_handler: Any = None,
        raise_on_error: bool = True,
        meta: dict[str, Any] | None = None,
        cache_mode: CacheMode = "use",
    ) -> CachedCall:
        """The parsed FastMCP result (with `.data`) and the cache's outcome."""
        raw = await self.call_mcp(
            name, arguments, progress_handler, timeout, meta, version=version, cache_mode=cache_mode
        )
        parsed = await self._client._parse_call_tool_result(name, raw.result, raise_on_error=raise_on_error)
        return CachedCall(parsed, raw.outcome)

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        version: str | None = None,
        timeout: Any = None,  # noqa: ASYNC109 - the same signature as fastmcp.Client
        progress_handler: Any = None,
        raise_on_error: bool = True,
        meta: dict[str, Any] | None = None,
        cache_mode: CacheMode = "use",
    ) -> FastMCPCallToolResult:
        call = await self.call(
            name,
            arguments,
            version=version,
            timeout=timeout,
            progress_handler=progress_handler,
            raise_on_error=raise_on_error,
            meta=meta,
            cache_mode=cache_mode,
        )
        result: FastMCPCallToolResult = call.result
        return result
