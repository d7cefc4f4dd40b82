"""The proxy's one connection to its upstream server, opened before the host is served and kept for the
proxy's life.

One connection, not one per request (FastMCP's `create_proxy` default): a revalidation is worth a few
hundred bytes only if it does not pay for a handshake, and a stdio upstream must not be started again
for every call. It is opened before the host's first message is read, so a slow upstream start (an
`npx` download) costs the host's first request, not a discovery timeout, and a failing one is reported
before the host connects.

The connection is FastMCP's `ProxyClient`, which relays what the upstream asks of the host (sampling,
elicitation, roots) and what it tells it (logging, progress, list changes). `ToolCache.wrap` hooks its
session, so the upstream's change notifications end the freshness of its cached answers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import mcp_types as mt
from fastmcp.client.transports import ClientTransport, StdioTransport, StreamableHttpTransport
from fastmcp.server.providers.proxy import ProxyClient

from mcpcache.client.cache import ToolCache
from mcpcache.client.identity import stdio_server_id, url_server_id
from mcpcache.proxy.settings import HttpUpstream, ProxySettings, StdioUpstream, Upstream

logger = logging.getLogger("mcpcache.proxy")


def upstream_transport(upstream: Upstream) -> ClientTransport:
    match upstream:
        case StdioUpstream():
            # The upstream gets the environment the host gave the proxy: that is where servers take their
            # tokens and settings, and the host meant them for the server, not for the proxy.
            return StdioTransport(
                upstream.command, list(upstream.args), env=dict(os.environ), cwd=upstream.cwd, keep_alive=False
            )
        case HttpUpstream():
            # No cap on an event's size: the proxy relays what upstream sends, and a multi-megabyte answer is
            # exactly what it is for; a cap is the host's to set.
            return StreamableHttpTransport(upstream.url, headers=upstream.header_dict(), max_sse_event_size=None)


def upstream_identity(settings: ProxySettings) -> str:
    """The upstream's identity in cache keys: its endpoint (docs/protocol.md section 5), unless the user
    named it. For stdio the endpoint includes the environment (hashed), so answers kept by a proxy that a
    host starts with a different environment are not reused unless `--server-id` names the server."""
    if settings.server_id is not None:
        return "named:" + settings.server_id
    upstream = settings.upstream
    match upstream:
        case StdioUpstream():
            return stdio_server_id(upstream.command, upstream.args, upstream.cwd, dict(os.environ))
        case HttpUpstream():
            return url_server_id(upstream.url)


class UpstreamLink:
    """The connected upstream client, the caching view over it, and what the upstream said about itself."""

    def __init__(self, settings: ProxySettings, cache: ToolCache) -> None:
        self.settings = settings
        self.cache = cache
        self.server_id = upstream_identity(settings)
        self.client: ProxyClient[Any] = ProxyClient(upstream_transport(settings.upstream), mode=settings.upstream_era)
        self.view: Any = None
        """`cache.wrap(client)`: hooks the session's notifications and reads the tools' annotations."""

    async def open(self) -> None:
        await self.client.__aenter__()  # type: ignore[no-untyped-call]  # fastmcp leaves it unannotated
        self.view = self.cache.wrap(self.client, server_id=self.server_id)

    async def aclose(self) -> None:
        await self.client.__aexit__(None, None, None)  # type: ignore[no-untyped-call]

    @property
    def server_info(self) -> mt.Implementation | None:
        return self.client.server_info

    @property
    def instructions(self) -> str | None:
        # The handshake's result on the handshake era, the discovery result on 2026-07-28.
        result = self.client.initialize_result or self.client.session.discover_result
        return result.instructions if result is not None else None

    async def read_only(self, name: str) -> bool | None:
        value: bool | None = await self.view.read_only(name)
        return value

    async def idempotent(self, name: str) -> bool | None:
        value: bool | None = await self.view.idempotent(name)
        return value

    async def declarations(self) -> Mapping[str, Any] | None:
        value: Mapping[str, Any] | None = await self.view.declarations()
        return value
