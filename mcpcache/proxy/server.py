"""`mcpcache proxy`: a stdio MCP server that is one upstream server, seen through the tool cache.

The proxy is FastMCP's (`FastMCPProxy`): tools, resources, resource templates, prompts, their change
notifications, logging, progress, cancellation, and the upstream's sampling, elicitation and roots
requests to the host pass through it. `CachingMiddleware` takes `tools/call` (and, with references,
`tools/list`) on the way through. The host sees the upstream's name, version and instructions.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
import threading
from typing import Any

import anyio
from fastmcp.server.providers.proxy import FastMCPProxy

from mcpcache.client.cache import ToolCache
from mcpcache.client.identity import shown_url
from mcpcache.gateway.passthrough import PassedUpstream, install_passthrough
from mcpcache.proxy.calls import CachingMiddleware
from mcpcache.proxy.link import UpstreamLink
from mcpcache.proxy.settings import HttpUpstream, ProxySettings, StoreChoice
from mcpcache.refs import References, ShownMemory
from mcpcache.stores import opening
from mcpcache.stores.base import Store

logger = logging.getLogger("mcpcache.proxy")


class UpstreamUnavailable(RuntimeError):
    """The upstream server could not be started or reached; the message is one line for the user."""


def open_store(choice: StoreChoice) -> Store:
    return opening.open_store(sqlite=choice.sqlite_path, redis=choice.redis_url)


def references_for(settings: ProxySettings, store: Store) -> References | None:
    if settings.refs is None:
        return None
    return References(
        store,
        conversation_id=settings.refs.conversation_id,
        threshold_bytes=settings.refs.threshold_bytes,
        max_view_bytes=settings.refs.max_view_bytes,
        shown=ShownMemory(max_turns=settings.refs.remember_turns) if settings.refs.remember_turns else None,
    )


def build_proxy(link: UpstreamLink, references: References | None) -> FastMCPProxy:
    """The FastMCP server the host talks to, over a connected `link`."""
    info = link.server_info
    server = FastMCPProxy(
        client_factory=lambda: link.client,
        identity="upstream",
        # The host sees the upstream's identity, as it would without the proxy (on protocol 2026-07-28 the
        # name and version are stamped on every result).
        name=info.name if info is not None else "mcpcache-proxy",
        version=info.version if info is not None else None,
        instructions=link.instructions,
        # Tool schemas are relayed as the upstream wrote them, `$ref`s included.
        dereference_schemas=False,
    )
    server.add_middleware(CachingMiddleware(link, references))
    # Completion and resource subscriptions, which FastMCP's proxy does not pass through.
    install_passthrough(server, [PassedUpstream("upstream", "", lambda: link.client, link.subscriber)])
    return server


def _describe(settings: ProxySettings) -> str:
    upstream = settings.upstream
    if isinstance(upstream, HttpUpstream):
        return shown_url(upstream.url)  # a log line never shows the URL's credentials
    return shlex.join([upstream.command, *upstream.args])


async def serve(settings: ProxySettings) -> None:
    """Connect the upstream, then serve the host on stdio until it closes the connection or sends SIGTERM."""
    store = open_store(settings.store)
    cache = ToolCache(store, settings.cache, partition=settings.partition)
    link = UpstreamLink(settings, cache)
    try:
        await link.open()
    except Exception as exc:
        await store.close()
        raise UpstreamUnavailable(f"could not connect to the upstream server ({_describe(settings)}): {exc}") from exc
    closing = _Closing(cache, link, store)
    try:
        references = references_for(settings, store)
        server = build_proxy(link, references)
        refs_note = f", references on (conversation {settings.refs.conversation_id!r})" if settings.refs else ""
        logger.info("serving %s through the tool cache%s", _describe(settings), refs_note)
        await _serve_until_ended(server, closing)
    finally:
        await closing.run()


class _Closing:
    """The proxy's end, once however it comes: the closing line with the cache's totals, then the upstream
    and the store closed.

    The line goes first: a host gives its server 2 s after closing its stdin (the MCP SDK's stdio client,
    then SIGTERM), and closing a stdio upstream may take the proxy as long."""

    def __init__(self, cache: ToolCache, link: UpstreamLink, store: Store) -> None:
        self.cache, self.link, self.store = cache, link, store
        self.started = False

    async def run(self) -> None:
        if self.started:
            return
        self.started = True
        stats: dict[str, Any] = self.cache.stats.as_dict()
        logger.info("closing; cache totals: %s", ", ".join(f"{k} {v:,}" for k, v in stats.items() if v))
        try:
            await self.cache.close()  # its background revalidations first: they use the upstream and the store
            await self.link.aclose()
        finally:
            await self.store.close()


async def _serve_until_ended(server: FastMCPProxy, closing: _Closing) -> None:
    """Serve the host on stdio until it closes the proxy's stdin, or sends SIGTERM (how hosts stop their
    servers, the MCP SDK's 2 s after closing stdin).

    On SIGTERM the proxy closes (`closing`) and exits: the SDK's stdio server reads stdin in a thread that
    no cancellation interrupts, and the host may hold stdin open. A second SIGTERM during the close is
    taken as the first; SIGKILL is the host's last word, as before."""
    async with anyio.create_task_group() as group:
        if threading.current_thread() is threading.main_thread():  # signal handlers: the main thread only

            async def on_sigterm() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM) as received:
                    async for _ in received:
                        with anyio.CancelScope(shield=True):
                            await closing.run()
                        sys.stderr.flush()
                        os._exit(0)

            group.start_soon(on_sigterm)
        await server.run_async(transport="stdio", show_banner=False)
        group.cancel_scope.cancel()


def configure_logging(verbose: bool) -> None:
    """One line per tool call on stderr (the host's log of this server), unless asked to be quiet."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("mcpcache proxy: %(message)s"))
    proxy_logger = logging.getLogger("mcpcache.proxy")
    proxy_logger.addHandler(handler)
    proxy_logger.setLevel(logging.INFO if verbose else logging.WARNING)
    proxy_logger.propagate = False
