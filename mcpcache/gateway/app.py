"""Build the gateway from its configuration: FastMCP proxies of the upstreams, the auth that verifies
callers, the shared store, and the middleware that stamps and serves the declared tools.

The gateway is a FastMCP server whose tools, resources and prompts come from one `ProxyProvider` per
upstream (FastMCP's own proxy: lists, resources, prompts, progress and the rest pass through as FastMCP
relays them). `GatewayMiddleware` is the outermost middleware and handles only the tools the
configuration declares.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from cachetools import LRUCache
from fastmcp import Client, FastMCP
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from fastmcp.server.auth import TokenVerifier
from fastmcp.server.dependencies import get_context
from fastmcp.server.providers.proxy import ProxyClient, ProxyProvider
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcpcache.client.identity import stdio_server_id, url_server_id_as
from mcpcache.client.policy import DEFAULT_MAX_ANSWER_BYTES
from mcpcache.gateway.config import (
    DEFAULT_DECODED_BYTES,
    DEFAULT_PARTITIONS,
    AuthSettings,
    GatewayConfig,
    StoreSettings,
    UpstreamSettings,
)
from mcpcache.gateway.decisions import Route
from mcpcache.gateway.declared import Declared, client_options
from mcpcache.gateway.deltas import GatewayDeltas
from mcpcache.gateway.history import DEFAULT_HISTORY_BYTES, StoreHistory
from mcpcache.gateway.listen import Learned, ListenerFactory
from mcpcache.gateway.memory import ReleaseMemoryAfterLargeAnswers
from mcpcache.gateway.middleware import GatewayMiddleware, PartitionCaches, gateway_cache_settings
from mcpcache.gateway.passthrough import PassedUpstream, SubscriberFactory, install_passthrough
from mcpcache.gateway.stderr import StderrRelay
from mcpcache.server.fastmcp import RevalidationCapability
from mcpcache.stores import opening
from mcpcache.stores.base import Store

__all__ = [
    "KEEP_ALIVE_S",
    "Gateway",
    "Upstream",
    "assemble_gateway",
    "build_auth",
    "build_gateway",
    "open_store",
    "upstream_of",
]

KEEP_ALIVE_S = 120
"""How long the gateway keeps a caller's idle HTTP connection open (uvicorn's `timeout_keep_alive`; its
default is 5 s). Longer than the idle expiry of the connection pools MCP callers use (httpx, under the MCP
SDK and FastMCP: 5 s; Node's undici: 4 s; Go's net/http: 90 s), so a caller always retires an idle
connection before the gateway closes it. With uvicorn's 5 s the two expire together, and a request the
caller sends on a connection in that moment is reset before any answer (the MCP SDK then ends the whole
session: modelcontextprotocol/python-sdk#3522)."""

DECLARATIONS_KEPT = 64
"""How many distinct caller declarations (capabilities, clientInfo) an HTTP upstream keeps a client for."""

STDIO_ERA = "stdio:auto"
"""The era part of store keys for a stdio upstream: one long-lived session, negotiated once (`mode="auto"`)."""


@dataclass(frozen=True)
class Upstream:
    """How the gateway reaches one upstream, and the identity its answers are stored under."""

    name: str
    settings: UpstreamSettings
    server_id: str
    client_factory: Callable[[], Client[Any]]
    era: str | None
    """The era in store keys: None means the caller's (HTTP upstreams speak the caller's era)."""
    close: Callable[[], Awaitable[None]] | None = None
    """Ends what the upstream keeps running between calls (a stdio upstream's process)."""
    stderr: StderrRelay | None = None
    """A stdio upstream's stderr, held until it has answered (`reach_upstreams`), then passed on."""
    subscriber: SubscriberFactory | None = None
    """Opens a session of its own for one caller's resource subscriptions (HTTP upstreams only)."""
    listener: ListenerFactory | None = None
    """Opens a 2026-07-28 session of its own for one caller's listen stream (HTTP upstreams only)."""
    learned: Learned = field(default_factory=Learned)
    """What the gateway learned of it when it reached it at start (`reach_upstreams` records it)."""


def _headers(settings: UpstreamSettings, environ: Mapping[str, str]) -> dict[str, str]:
    headers = dict(settings.headers)
    for header, variable in settings.headers_env.items():
        headers[header] = environ[variable]
    return headers


@dataclass(frozen=True)
class _Front:
    """The caller of the request being served, as the upstream must see it."""

    mode: str
    """The connect mode that makes the upstream speak the caller's era (as FastMCP's own proxy does)."""
    declared: Declared


def _front() -> _Front | None:
    """The caller of the request being served; None outside a request (the start-up check, say)."""
    try:
        ctx = get_context()
        request = ctx.request_context
    except RuntimeError:
        return None
    if request is None:
        return None
    mode = request.protocol_version if request.protocol_version in MODERN_PROTOCOL_VERSIONS else "legacy"
    session = ctx.session
    params = session.client_params
    return _Front(mode, Declared.of(session.client_capabilities, params.client_info if params else None))


async def _ignore(message: Any) -> None:
    return None


def upstream_of(
    name: str, settings: UpstreamSettings, environ: Mapping[str, str], *, hold_stderr: bool = False
) -> Upstream:
    """The upstream's client factory and identity.

    Identity (the server part of every store key): for a URL, the URL without credentials plus a digest of
    the credentials the gateway sends upstream (the URL's userinfo, which httpx sends as basic auth, and the
    configured headers), so answers fetched as one principal are never served as another's; for a command,
    the command, its arguments, working directory and environment (hashed). Forwarding callers' headers is
    a different upstream again.

    HTTP: a new upstream session per call, in the caller's era (FastMCP's proxy default; caller headers
    are forwarded only when configured). stdio: one long-lived process and session (`keep_alive`), which
    can speak only one era, so the gateway asks for the upstream's best (`mode="auto"`). Its stderr goes
    through a relay (`hold_stderr`: held until `reach_upstreams` has seen it answer).
    """
    if settings.url is not None:
        headers = _headers(settings, environ)
        server_id = url_server_id_as(settings.url, headers)
        if settings.forward_headers:
            server_id += "|forwarded-caller-headers"
        # No bound on one server-sent event: a multi-megabyte answer is one event. One TLS context for every
        # call: each call opens a new upstream session, and building a context (loading the CA bundle) for
        # each cost more than the rest of a call's overhead together.
        http = StreamableHttpTransport(
            settings.url, headers=headers, verify=httpx2.create_ssl_context(), max_sse_event_size=None
        )
        forward = settings.forward_headers
        # Outside a caller's request (the start-up check): the upstream's best era, whose capabilities say what
        # its listen streams deliver (`mcpcache.gateway.listen`).
        base: ProxyClient[Any] = ProxyClient(http, forward_incoming_headers=forward, mode="auto")
        # One client to copy per distinct caller declaration (capabilities and clientInfo), most recent kept.
        declared_bases: LRUCache[Declared, ProxyClient[Any]] = LRUCache(maxsize=DECLARATIONS_KEPT)

        def http_factory() -> Client[Any]:
            front = _front()
            if front is None:
                return base.new()
            template = declared_bases.get(front.declared)
            if template is None:
                options = client_options(front.declared)
                template = ProxyClient(http, forward_incoming_headers=forward, **options)
                declared_bases[front.declared] = template
            fresh = template.new()
            fresh.mode = front.mode
            return fresh

        def subscriber(declared: Declared, handler: Callable[[Any], Any]) -> Client[Any]:
            # Subscriptions are of the handshake era (2026-07-28 has subscriptions/listen instead).
            options = client_options(declared)
            return ProxyClient(
                http, forward_incoming_headers=forward, message_handler=handler, mode="legacy", **options
            )

        def listener(declared: Declared, version: str) -> Client[Any]:
            # Its messages are the listen stream's, which the SDK's listen driver reads; none is relayed as is.
            options = client_options(declared)
            return ProxyClient(http, forward_incoming_headers=forward, message_handler=_ignore, mode=version, **options)

        return Upstream(name, settings, server_id, http_factory, None, subscriber=subscriber, listener=listener)
    assert settings.command is not None
    program, *args = settings.command
    env = dict(settings.env) if settings.env is not None else None
    relay = StderrRelay(held=hold_stderr)
    stdio = StdioTransport(program, args, env=env, cwd=settings.cwd, keep_alive=True, log_file=relay.writer)
    stdio_base: ProxyClient[Any] = ProxyClient(stdio, forward_incoming_headers=False, mode="auto")
    server_id = stdio_server_id(program, args, settings.cwd, env)
    return Upstream(name, settings, server_id, stdio_base.new, STDIO_ERA, stdio.close, relay)


def build_auth(settings: AuthSettings, environ: Mapping[str, str]) -> TokenVerifier | None:
    """FastMCP's verifier for the configured auth (None: callers are not authenticated)."""
    required = list(settings.required_scopes) or None
    if settings.kind == "static":
        from fastmcp.server.auth.providers.jwt import StaticTokenVerifier

        tokens: dict[str, dict[str, Any]] = {}
        for token in settings.tokens:
            secret = token.token if token.token is not None else environ[token.token_env or ""]
            tokens[secret] = {"client_id": token.client_id, "scopes": list(token.scopes), "sub": token.subject}
        return StaticTokenVerifier(tokens, required_scopes=required)
    if settings.kind == "jwt":
        from fastmcp.server.auth.providers.jwt import JWTVerifier

        jwt = settings.jwt
        assert jwt is not None
        key = jwt.public_key
        if jwt.public_key_file is not None:
            key = Path(jwt.public_key_file).read_text(encoding="utf-8")
        return JWTVerifier(
            public_key=key,
            jwks_uri=jwt.jwks_uri,
            issuer=jwt.issuer,
            audience=jwt.audience,
            algorithm=jwt.algorithm,
            required_scopes=required,
        )
    return None


def open_store(settings: StoreSettings) -> Store:
    """The gateway's shared store: a `[store]` that names no location keeps answers in this process only."""
    return opening.open_store(
        sqlite=settings.sqlite, redis=settings.redis, namespace=settings.namespace, otherwise="memory"
    )


@dataclass
class Gateway:
    """The gateway's server and what it holds open: `aclose` ends stdio upstreams and closes the store."""

    server: FastMCP[Any]
    upstreams: Sequence[Upstream]
    store: Store | None

    async def aclose(self) -> None:
        for upstream in self.upstreams:
            if upstream.close is not None:
                await upstream.close()
            if upstream.stderr is not None:
                upstream.stderr.close()
        if self.store is not None:
            await self.store.close()


def build_gateway(
    config: GatewayConfig,
    *,
    store: Store | None = None,
    environ: Mapping[str, str] | None = None,
    hold_upstream_stderr: bool = False,
    tracer_provider: Any | None = None,
    meter_provider: Any | None = None,
) -> Gateway:
    """The gateway. `store`: the shared store (None: tags and not-modified replies only).
    `hold_upstream_stderr`: see `upstream_of`. `tracer_provider`, `meter_provider`: see `assemble_gateway`."""
    env = os.environ if environ is None else environ
    upstreams = [
        upstream_of(name, settings, env, hold_stderr=hold_upstream_stderr)
        for name, settings in config.upstreams.items()
    ]
    server = assemble_gateway(
        config,
        upstreams,
        store=store,
        auth=build_auth(config.auth, env),
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
    )
    return Gateway(server, upstreams, store)


def assemble_gateway(
    config: GatewayConfig,
    upstreams: Sequence[Upstream],
    *,
    store: Store | None,
    auth: TokenVerifier | None,
    tracer_provider: Any | None = None,
    meter_provider: Any | None = None,
) -> FastMCP[Any]:
    """The gateway over upstreams already reachable (`build_gateway` makes them from the configuration).
    `tracer_provider`, `meter_provider`: the OpenTelemetry providers for its spans and counters
    (docs/observability.md); None: the global ones, once the application sets them."""
    for _, why in config.clashes():
        raise ValueError(why)
    # The gateway answers discovery itself (FastMCP's ProxyMetadataMiddleware would ask the upstream during
    # every caller's handshake, so a slow or down upstream would fail callers' connections).
    # Tool schemas are relayed as the upstream wrote them (`$defs`, `$ref`, `$anchor`: JSON Schema 2020-12).
    server: FastMCP[Any] = FastMCP(
        config.gateway.name, instructions=config.gateway.instructions, auth=auth, dereference_schemas=False
    )
    routes: dict[str, Route] = {}
    for upstream in upstreams:
        server.add_provider(ProxyProvider(upstream.client_factory), namespace=upstream.settings.namespace or "")
        for tool, tool_settings in upstream.settings.tools.items():
            public = upstream.settings.public_name(tool)
            trust = upstream.settings.trust_upstream_tags
            route = Route(public, upstream.name, tool, upstream.server_id, tool_settings, upstream.era, trust)
            routes[public] = route
    caches = None
    deltas = None
    meta_key = config.gateway.meta_key
    if store is not None:
        store_settings = config.store
        cache_settings = gateway_cache_settings(
            meta_key=meta_key,
            decoded_bytes=store_settings.decoded_bytes if store_settings else DEFAULT_DECODED_BYTES,
            max_answer_bytes=store_settings.max_answer_bytes if store_settings else DEFAULT_MAX_ANSWER_BYTES,
        )
        caches = PartitionCaches(
            store,
            settings=cache_settings,
            partitions=store_settings.partitions if store_settings else DEFAULT_PARTITIONS,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
        )
        history_bytes = store_settings.delta_history_bytes if store_settings else DEFAULT_HISTORY_BYTES
        if history_bytes > 0:
            history = StoreHistory(
                store, max_bytes=history_bytes, max_answer_bytes=caches.max_answer_bytes, meta_key=meta_key
            )
            deltas = GatewayDeltas(history)
    middleware = GatewayMiddleware(
        routes,
        caches=caches,
        partition_by=config.auth.partition_by,
        meta_key=meta_key,
        deltas=deltas,
        meter_provider=meter_provider,
    )
    install_passthrough(
        server,
        [
            PassedUpstream(
                up.name, up.settings.namespace or "", up.client_factory, up.subscriber, up.listener, up.learned
            )
            for up in upstreams
        ],
    )
    server.middleware.insert(0, middleware)
    server.middleware.insert(0, ReleaseMemoryAfterLargeAnswers())
    formats = deltas.formats if deltas is not None else ()
    server.add_extension(RevalidationCapability(meta_key, delta_formats=formats))
    return server
