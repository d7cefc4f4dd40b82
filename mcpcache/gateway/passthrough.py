"""The requests FastMCP's proxy does not pass through, passed through: argument completion and resource
subscriptions (and, on 2026-07-28, listen streams: `mcpcache.gateway.listen`).

FastMCP's `ProxyProvider` relays tools, resources, prompts and their lists, but answers
`completion/complete`, `resources/subscribe` and `resources/unsubscribe` with "Method not found", so an
upstream's completions and subscriptions were lost behind the gateway. Each is routed to the upstream
that serves the prompt, template or resource it names (by the upstream's namespace, as FastMCP names
them: `NS_name`, `scheme://NS/path`).

Completion is one request: it goes through the upstream's client factory like any other (a session per
call for an HTTP upstream, in the caller's era and with the caller's declared capabilities).
A subscription is not: the upstream sends `notifications/resources/updated` on the session that
subscribed, long after the subscribe request. So each caller connection that subscribes gets an upstream
session of its own per upstream, kept while that connection lives; the updates it receives are relayed
to the caller's connection (under the name the caller subscribed to), and it is closed when the caller's
connection ends. A stdio upstream keeps one session for all callers and cannot tell them apart: its
subscriptions are refused ("Method not found", as before).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as mt
from mcp.shared.exceptions import MCPError

from mcpcache.gateway.declared import Declared
from mcpcache.gateway.listen import Learned, ListenerFactory, install_listen

if TYPE_CHECKING:
    from fastmcp import Client, FastMCP

__all__ = [
    "PassedUpstream",
    "SubscriberFactory",
    "Subscriptions",
    "install_passthrough",
    "local_name",
    "local_uri",
    "route_uri",
]

_URI = re.compile(r"^([^:]+://)(.*)$")


def local_name(name: str, namespace: str) -> str | None:
    """The upstream's own name for a prompt the gateway lists as `name`, or None if not this upstream's."""
    if not namespace:
        return name
    prefix = f"{namespace}_"
    return name[len(prefix) :] if name.startswith(prefix) else None


def local_uri(uri: str, namespace: str) -> str | None:
    """The upstream's own URI (or template) for one the gateway lists as `uri`, or None if not this one's."""
    if not namespace:
        return uri
    match = _URI.match(uri)
    if match is None:
        return None
    scheme, path = match.groups()
    prefix = f"{namespace}/"
    return scheme + path[len(prefix) :] if path.startswith(prefix) else None


SubscriberFactory = Callable[[Declared, Callable[[Any], Any]], "Client[Any]"]
"""Opens a client of one upstream that declares what the caller declared and hands every message it
receives to the given handler."""


@dataclass(frozen=True)
class PassedUpstream:
    """What passing a request through to one upstream takes (from the gateway's `Upstream`)."""

    name: str
    namespace: str
    client_factory: Callable[[], Client[Any]]
    """A client for one request, in the caller's era and with the caller's declaration."""
    subscriber: SubscriberFactory | None
    """None: the upstream cannot hold a session per caller (stdio), and takes no subscriptions."""
    listener: ListenerFactory | None = None
    """Opens a 2026-07-28 session for one caller's listen stream; None: the gateway relays none (stdio)."""
    learned: Learned = field(default_factory=Learned)
    """What the gateway learned of the upstream when it reached it at start."""


def _route(
    upstreams: Sequence[PassedUpstream], local: Callable[[str, str], str | None], key: str
) -> tuple[PassedUpstream, str]:
    """The upstream a name or URI belongs to: the one whose namespace it carries, else the one without."""
    for upstream in sorted(upstreams, key=lambda up: up.namespace == ""):  # namespaced ones first
        found = local(key, upstream.namespace)
        if found is not None:
            return upstream, found
    raise MCPError(code=mt.INVALID_PARAMS, message=f"No upstream serves {key!r}")


def route_uri(upstreams: Sequence[PassedUpstream], uri: str) -> tuple[PassedUpstream, str]:
    """The upstream that serves a resource the gateway lists as `uri`, and its own URI for it."""
    return _route(upstreams, local_uri, uri)


def completion_handler(upstreams: Sequence[PassedUpstream]) -> Callable[..., Any]:
    async def complete(
        ref: mt.PromptReference | mt.ResourceTemplateReference,
        argument: mt.CompletionArgument,
        context: mt.CompletionContext | None,
    ) -> mt.Completion:
        local_ref: mt.PromptReference | mt.ResourceTemplateReference
        if isinstance(ref, mt.PromptReference):
            upstream, name = _route(upstreams, local_name, ref.name)
            local_ref = ref.model_copy(update={"name": name})
        else:
            upstream, uri = _route(upstreams, local_uri, ref.uri)
            local_ref = ref.model_copy(update={"uri": uri})
        client = upstream.client_factory()
        async with client:
            result = await client.complete_mcp(
                local_ref,
                {"name": argument.name, "value": argument.value},
                context.arguments if context is not None else None,
            )
        return result.completion

    return complete


@dataclass
class _Held:
    """One caller connection's upstream session for subscriptions, and what it subscribed to there."""

    client: Client[Any]
    uris: dict[str, str] = field(default_factory=dict)
    """The upstream's URI -> the caller's name for it."""


class Subscriptions:
    """`resources/subscribe` and `resources/unsubscribe` handlers for the gateway's low-level server."""

    def __init__(self, upstreams: Sequence[PassedUpstream]) -> None:
        self._upstreams = upstreams
        self._held: dict[tuple[int, str], _Held] = {}

    async def subscribe(self, ctx: Any, params: mt.SubscribeRequestParams) -> mt.EmptyResult:
        upstream, uri = _route(self._upstreams, local_uri, str(params.uri))
        held = await self._session(ctx, upstream)
        held.uris[uri] = str(params.uri)
        # send_request: the SDK's subscribe_resource warns that 2026-07-28 removed it (this session is 2025's).
        request = mt.SubscribeRequest(params=mt.SubscribeRequestParams(uri=uri))
        await held.client.session.send_request(request, mt.EmptyResult)
        return mt.EmptyResult()

    async def unsubscribe(self, ctx: Any, params: mt.UnsubscribeRequestParams) -> mt.EmptyResult:
        upstream, uri = _route(self._upstreams, local_uri, str(params.uri))
        held = self._held.get((id(_connection(ctx)), upstream.name))
        if held is not None and uri in held.uris:
            request = mt.UnsubscribeRequest(params=mt.UnsubscribeRequestParams(uri=uri))
            await held.client.session.send_request(request, mt.EmptyResult)
            del held.uris[uri]
        return mt.EmptyResult()

    async def _session(self, ctx: Any, upstream: PassedUpstream) -> _Held:
        connection = _connection(ctx)
        key = (id(connection), upstream.name)
        held = self._held.get(key)
        if held is not None:
            return held
        if upstream.subscriber is None:
            raise MCPError(code=mt.METHOD_NOT_FOUND, message=f"upstream {upstream.name!r} takes no subscriptions")
        caller = ctx.session
        params = caller.client_params
        declared = Declared.of(caller.client_capabilities, params.client_info if params else None)

        uris: dict[str, str] = {}

        async def relay(message: Any) -> None:
            if isinstance(message, mt.ResourceUpdatedNotification):
                shown = uris.get(str(message.params.uri))
                if shown is not None:  # never one the caller did not subscribe to (or no longer does)
                    await caller.send_resource_updated(shown)

        client = upstream.subscriber(declared, relay)
        await client.__aenter__()  # type: ignore[no-untyped-call]  # kept open past this request, see below
        held = _Held(client, uris)
        self._held[key] = held

        async def close() -> None:
            self._held.pop(key, None)
            with anyio.CancelScope(shield=True):  # the connection's exit runs as its task is cancelled
                await client.__aexit__(None, None, None)  # type: ignore[no-untyped-call]

        connection.exit_stack.push_async_callback(close)
        return held


def _connection(ctx: Any) -> Any:
    # Private (mcp 2.3.0): the caller's `Connection` (its exit stack ends the upstream session with it) is
    # held by the per-request `ServerSession` only; FastMCP's stateful proxy reads it the same way
    # (tests/gateway/test_passthrough.py fails if it moves).
    return ctx.session._connection


def install_passthrough(server: FastMCP[Any], upstreams: Sequence[PassedUpstream]) -> None:
    """Completion and subscriptions on the gateway's server, routed to `upstreams`."""
    server.add_completion_handler(completion_handler(upstreams))
    subscriptions = Subscriptions(upstreams)
    # Private (fastmcp 4.2.3): FastMCP has no API for these methods; its low-level server does, and serving
    # resources/subscribe is what makes it declare `resources.subscribe` (test_passthrough.py checks both).
    low = server._mcp_server
    low.add_request_handler("resources/subscribe", mt.SubscribeRequestParams, subscriptions.subscribe)
    low.add_request_handler("resources/unsubscribe", mt.UnsubscribeRequestParams, subscriptions.unsubscribe)
    install_listen(server, upstreams, lambda uri: route_uri(upstreams, uri))
