"""The proxy's connections to its upstream server: one opened before the host is served, and one per
era and declared capabilities the host's requests need (`UpstreamLink.use`), each kept for the proxy's life.

Long-lived connections, not one per request (FastMCP's `create_proxy` default): a revalidation is worth a
few hundred bytes only if it does not pay for a handshake, and a stdio upstream must not be started again
for every call. The first is opened before the host's first message is read, so a slow upstream start (an
`npx` download) costs the host's first request, not a discovery timeout, and a failing one is reported
before the host connects.

Each connection is FastMCP's `ProxyClient`, which relays what the upstream asks of the host (sampling,
elicitation, roots) and what it tells it (logging, progress, list changes). `ToolCache.wrap` hooks its
session, so the upstream's change notifications end the freshness of its cached answers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

import anyio
import mcp_types as mt
from fastmcp.client.transports import ClientTransport, StdioTransport, StreamableHttpTransport
from fastmcp.server.context import Context
from fastmcp.server.providers.proxy import ProxyClient
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcpcache.client.cache import ToolCache
from mcpcache.client.identity import stdio_server_id, url_server_id
from mcpcache.gateway.declared import Declared, client_options
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


@dataclass(frozen=True)
class LinkKey:
    """What an upstream session is opened with: the era (a connect mode) and the client capabilities."""

    mode: str
    """"legacy", or the 2026-07-28 version the host speaks."""
    capabilities: Declared
    """The host's declared capabilities (its clientInfo is passed on, but takes no session of its own)."""


def key_of(ctx: Context) -> LinkKey | None:
    """The session a host request needs: its era and its declared capabilities (None outside a request)."""
    request = ctx.request_context
    if request is None:
        return None
    mode = request.protocol_version if request.protocol_version in MODERN_PROTOCOL_VERSIONS else "legacy"
    declared = Declared.of(ctx.session.client_capabilities, None)
    return LinkKey(mode, declared)


class UpstreamLink:
    """The upstream sessions, the caching view over each, and what the upstream said about itself.

    One session is opened before the host is served (`open`). A host request is served on the session of
    its era that declares what the host declared (`use`): an upstream asks of its client only what that
    client offered, and answers in its era (a 2026-07-28 host gets input-required results, a 2025-11-25
    host gets the upstream's sampling and elicitation requests relayed). The first request whose era or
    capabilities differ from the start-up session's opens one, with the host's clientInfo; the start-up
    session is closed then if it served nothing (a stdio upstream then runs once again, once per run).
    A host normally has one era and one declaration, so the proxy keeps one session; `SESSIONS_KEPT` bounds
    a host that changes its declaration from request to request (2026-07-28 lets it).
    """

    SESSIONS_KEPT = 4

    def __init__(self, settings: ProxySettings, cache: ToolCache) -> None:
        self.settings = settings
        self.cache = cache
        self.server_id = upstream_identity(settings)
        self._startup: ProxyClient[Any] = ProxyClient(upstream_transport(settings.upstream), mode=settings.upstream_era)
        self._startup_used = False
        self._sessions: dict[LinkKey, tuple[ProxyClient[Any], Any]] = {}
        self._current: ContextVar[tuple[ProxyClient[Any], Any] | None] = ContextVar("mcpcache_proxy_link", default=None)
        self._opening = anyio.Lock()

    async def open(self) -> None:
        await self._startup.__aenter__()  # type: ignore[no-untyped-call]  # fastmcp leaves it unannotated
        version = self._startup.session.protocol_version
        mode = version if version in MODERN_PROTOCOL_VERSIONS else "legacy"
        self._sessions[LinkKey(mode, _PROXY_DEFAULT)] = (self._startup, self._wrap(self._startup))

    def _wrap(self, client: ProxyClient[Any]) -> Any:
        """`cache.wrap(client)`: hooks the session's notifications and reads the tools' annotations."""
        return self.cache.wrap(client, server_id=self.server_id)

    async def use(self, ctx: Context) -> None:
        """Serve the rest of this host request on the session it needs, opened now if there is none."""
        key = key_of(ctx)
        if key is None:
            return
        found = self._sessions.get(key)
        if found is None:
            async with self._opening:
                found = self._sessions.get(key) or await self._open(key, ctx)
        if found[0] is self._startup:
            self._startup_used = True
        self._current.set(found)

    async def _open(self, key: LinkKey, ctx: Context) -> tuple[ProxyClient[Any], Any]:
        params = ctx.session.client_params
        options = client_options(replace(key.capabilities, client_info=_info(params)))
        client: ProxyClient[Any] = ProxyClient(upstream_transport(self.settings.upstream), mode=key.mode, **options)
        await client.__aenter__()  # type: ignore[no-untyped-call]
        opened = (client, self._wrap(client))
        self._sessions[key] = opened
        unused = [k for k, held in self._sessions.items() if held[0] is self._startup and not self._startup_used]
        oldest = list(self._sessions)[: max(0, len(self._sessions) - self.SESSIONS_KEPT)]
        for dropped in dict.fromkeys([*unused, *oldest]):
            held = self._sessions.pop(dropped)
            await held[0].__aexit__(None, None, None)  # type: ignore[no-untyped-call]
        return opened

    async def aclose(self) -> None:
        for client, _ in list(self._sessions.values()):
            await client.__aexit__(None, None, None)  # type: ignore[no-untyped-call]
        self._sessions.clear()

    def subscriber(self, declared: Declared, handler: Callable[[Any], Any]) -> ProxyClient[Any]:
        """A session of its own for the host's resource subscriptions, whose messages go to `handler`
        (the proxy's sessions relay list changes only); a stdio upstream runs once more for it."""
        options = client_options(declared)
        transport = upstream_transport(self.settings.upstream)
        return ProxyClient(transport, message_handler=handler, mode="legacy", **options)

    @property
    def client(self) -> ProxyClient[Any]:
        """The session of the host request being served (the start-up one outside a request)."""
        current = self._current.get()
        return current[0] if current is not None else self._startup

    @property
    def view(self) -> Any:
        current = self._current.get()
        if current is not None:
            return current[1]
        return next(iter(self._sessions.values()))[1]

    @property
    def server_info(self) -> mt.Implementation | None:
        return self._startup.server_info

    @property
    def instructions(self) -> str | None:
        # The handshake's result on the handshake era, the discovery result on 2026-07-28.
        result = self._startup.initialize_result or self._startup.session.discover_result
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


def _info(params: mt.InitializeRequestParams | None) -> str | None:
    if params is None:
        return None
    return params.client_info.model_dump_json(by_alias=True, exclude_none=True)


_PROXY_DEFAULT = Declared.of(
    mt.ClientCapabilities(
        sampling=mt.SamplingCapability(), elicitation=mt.ElicitationCapability(), roots=mt.RootsCapability()
    ),
    None,
)
"""What the start-up session declares (FastMCP's proxy client relays all three)."""
