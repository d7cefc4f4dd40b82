"""2026-07-28 change notifications through the gateway: `subscriptions/listen` relayed to the upstreams, and a
discovery that declares only what they deliver.

On 2026-07-28 a server says a list changed, or a subscribed resource was updated, only on the stream of a
caller's `subscriptions/listen` request, and its discovery declares `listChanged` (and `resources.subscribe`)
only when it serves that request. The gateway answers discovery itself, so before this it declared none of
them and callers never heard of an upstream's changes.

A caller's listen request is relayed: for each upstream that delivers something the caller asked for, the
gateway opens a listen stream of its own on an upstream session in the caller's era, declaring what the
caller declared, with the caller's filter (resource URIs under the upstream's own names). It acknowledges
the caller once every upstream has acknowledged it (so that a change the caller causes right after the
acknowledgment is not missed) with what the upstreams honored, then relays each event, the resource URIs
under the caller's names, tagged with the caller's subscription id. When an upstream's stream ends, so does
the caller's: gracefully if the upstream closed it gracefully, else with an error, and the caller listens
again and refetches, as it would directly. One upstream session and stream per listening caller per
upstream, held while the caller listens (`MAX_LISTENS` at once).

What the gateway declares on 2026-07-28 is what the upstreams it can relay from declared when it reached
them at start (`Learned`): an upstream that speaks only the handshake era has no listen stream to relay,
and a stdio upstream is one session for every caller, which the gateway does not divide into listens (its
list changes reach callers only by their listing again). An upstream not reached at start (one sent the
callers' own headers) is assumed to deliver what it is asked: its own acknowledgment then says what it does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio
import mcp_types as mt
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client.subscriptions import SubscriptionLost, listen
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import (
    SUBSCRIPTION_ID_META_KEY,
    ResourceUpdated,
    ServerEvent,
    event_to_notification,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcpcache.gateway.declared import Declared

if TYPE_CHECKING:
    from fastmcp import Client, FastMCP

__all__ = [
    "MAX_LISTENS",
    "Delivers",
    "Learned",
    "ListenerFactory",
    "Listens",
    "Relayed",
    "RouteUri",
    "install_listen",
    "public_uri",
]

logger = logging.getLogger("mcpcache.gateway")

MAX_LISTENS = 256
"""Callers' listen streams open at once (each holds an upstream session per upstream); one more is refused
with the MCP SDK's own answer ("Subscription limit reached")."""

MAX_BUFFERED_EVENTS = 1024
"""Events waiting for a caller that reads slowly; past them its stream is ended, as the MCP SDK's server
ends one (the caller listens again and refetches)."""

ListenerFactory = Callable[[Declared, str], "Client[Any]"]
"""Opens a client of one upstream in the given 2026-07-28 protocol version, declaring what the caller
declared, for one listen stream."""


@dataclass
class Learned:
    """What the gateway learned of an upstream when it reached it at start; None: not reached."""

    capabilities: mt.ServerCapabilities | None = None
    version: str | None = None
    """The protocol version the gateway's session with it spoke."""


class Relayed(Protocol):
    """What relaying a listen stream takes of an upstream (`passthrough.Relayed` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def listener(self) -> ListenerFactory | None: ...
    @property
    def learned(self) -> Learned: ...


RouteUri = Callable[[str], tuple[Relayed, str]]
"""The upstream that serves a resource the gateway lists under a URI, and its own URI for it."""


@dataclass(frozen=True)
class Delivers:
    """What an upstream's listen stream may carry, as the upstream declared it."""

    tools: bool = False
    prompts: bool = False
    resources: bool = False
    subscribe: bool = False

    @property
    def anything(self) -> bool:
        return self.tools or self.prompts or self.resources or self.subscribe

    @classmethod
    def of(cls, learned: Learned, *, can_listen: bool) -> Delivers:
        if not can_listen:
            return cls()
        caps = learned.capabilities
        if caps is None:  # not reached: it is asked, and its acknowledgment says
            return cls(True, True, True, True)
        if learned.version not in MODERN_PROTOCOL_VERSIONS:
            return cls()  # the handshake era only: no listen stream
        return cls(
            tools=bool(caps.tools and caps.tools.list_changed),
            prompts=bool(caps.prompts and caps.prompts.list_changed),
            resources=bool(caps.resources and caps.resources.list_changed),
            subscribe=bool(caps.resources and caps.resources.subscribe),
        )

    def __or__(self, other: Delivers) -> Delivers:
        return Delivers(
            self.tools or other.tools,
            self.prompts or other.prompts,
            self.resources or other.resources,
            self.subscribe or other.subscribe,
        )


def delivered(upstreams: Sequence[Relayed]) -> Delivers:
    """What the gateway's listen streams may carry: what any upstream it relays from delivers."""
    total = Delivers()
    for upstream in upstreams:
        total |= Delivers.of(upstream.learned, can_listen=upstream.listener is not None)
    return total


def public_uri(uri: str, namespace: str) -> str:
    """The gateway's name for an upstream's resource URI (the inverse of `passthrough.local_uri`)."""
    if not namespace:
        return uri
    scheme, sep, path = uri.partition("://")
    return f"{scheme}{sep}{namespace}/{path}" if sep else uri


def _public_event(event: ServerEvent, namespace: str) -> ServerEvent:
    if isinstance(event, ResourceUpdated):
        return ResourceUpdated(public_uri(event.uri, namespace))
    return event


_Ending = Literal["graceful", "lost"]


@dataclass
class _Plan:
    upstream: Relayed
    wanted: mt.SubscriptionFilter
    """The caller's filter for this upstream, URIs under the upstream's names."""
    uris: dict[str, str]
    """The upstream's URI -> the caller's, for the URIs asked of it."""
    honored: mt.SubscriptionFilter | None = None


class Listens:
    """The gateway's `subscriptions/listen` handler (see the module docstring)."""

    def __init__(self, upstreams: Sequence[Relayed], route_uri: RouteUri, *, max_listens: int = MAX_LISTENS) -> None:
        self._upstreams = upstreams
        self._route_uri = route_uri
        self._max_listens = max_listens
        self.open = 0

    def _plans(self, wanted: mt.SubscriptionFilter) -> list[_Plan]:
        uris: dict[str, dict[str, str]] = {}
        for uri in wanted.resource_subscriptions or ():
            try:
                upstream, local = self._route_uri(uri)
            except MCPError:
                continue  # no upstream serves it: not honored
            uris.setdefault(upstream.name, {})[local] = uri
        plans = []
        for upstream in self._upstreams:
            delivers = Delivers.of(upstream.learned, can_listen=upstream.listener is not None)
            mine = uris.get(upstream.name, {}) if delivers.subscribe else {}
            asked = mt.SubscriptionFilter(
                tools_list_changed=True if wanted.tools_list_changed and delivers.tools else None,
                prompts_list_changed=True if wanted.prompts_list_changed and delivers.prompts else None,
                resources_list_changed=True if wanted.resources_list_changed and delivers.resources else None,
                resource_subscriptions=list(mine) or None,
            )
            if asked.tools_list_changed or asked.prompts_list_changed or asked.resources_list_changed or mine:
                plans.append(_Plan(upstream, asked, mine))
        return plans

    async def __call__(self, ctx: Any, params: mt.SubscriptionsListenRequestParams) -> mt.SubscriptionsListenResult:
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise MCPError(mt.INVALID_REQUEST, "subscriptions/listen requires a request id")
        if self.open >= self._max_listens:
            raise MCPError(mt.INTERNAL_ERROR, "Subscription limit reached")
        self.open += 1
        try:
            return await self._serve(ctx, params, subscription_id)
        finally:
            self.open -= 1

    async def _serve(
        self, ctx: Any, params: mt.SubscriptionsListenRequestParams, subscription_id: mt.RequestId
    ) -> mt.SubscriptionsListenResult:
        caller = ctx.session
        caller_params = caller.client_params
        declared = Declared.of(caller.client_capabilities, caller_params.client_info if caller_params else None)
        version = str(ctx.protocol_version)
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        plans = self._plans(params.notifications)
        send, receive = anyio.create_memory_object_stream[ServerEvent | _Ending](MAX_BUFFERED_EVENTS)
        ended: _Ending = "graceful"
        async with anyio.create_task_group() as group:
            ready = [anyio.Event() for _ in plans]
            for plan, done in zip(plans, ready, strict=True):
                group.start_soon(self._relay, plan, declared, version, send.clone(), done)
            send.close()
            for done in ready:
                await done.wait()
            honored = _union([plan for plan in plans if plan.honored is not None])
            await caller.send_notification(
                mt.SubscriptionsAcknowledgedNotification(
                    params=mt.SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)
                ),
                related_request_id=subscription_id,
            )
            if not any(plan.honored is not None for plan in plans):
                await anyio.sleep_forever()  # nothing to relay: the stream stays open until the caller leaves
            async for item in receive:
                if isinstance(item, str):  # one upstream's stream ended: so does the caller's
                    ended = item
                    group.cancel_scope.cancel()
                    break
                await caller.send_notification(event_to_notification(item, meta), related_request_id=subscription_id)
        if ended == "lost":
            raise MCPError(mt.INTERNAL_ERROR, "an upstream's subscription stream ended; listen again and refetch")
        return mt.SubscriptionsListenResult(_meta=meta)

    async def _relay(
        self,
        plan: _Plan,
        declared: Declared,
        version: str,
        out: MemoryObjectSendStream[ServerEvent | _Ending],
        ready: anyio.Event,
    ) -> None:
        upstream = plan.upstream
        assert upstream.listener is not None
        wanted = plan.wanted
        ending: _Ending = "lost"
        async with out:
            try:
                client = upstream.listener(declared, version)
                async with (
                    client,
                    listen(
                        client.session,
                        tools_list_changed=bool(wanted.tools_list_changed),
                        prompts_list_changed=bool(wanted.prompts_list_changed),
                        resources_list_changed=bool(wanted.resources_list_changed),
                        resource_subscriptions=wanted.resource_subscriptions or (),
                    ) as subscription,
                ):
                    plan.honored = subscription.honored
                    ready.set()
                    async for event in subscription:
                        try:
                            out.send_nowait(_public_event(event, upstream.namespace))
                        except anyio.WouldBlock:
                            logger.warning(
                                "a caller's listen stream fell %d events behind; ending it", MAX_BUFFERED_EVENTS
                            )
                            break
                    else:
                        ending = "graceful"
            except SubscriptionLost as exc:
                logger.info("upstream %r ended a listen stream: %s", upstream.name, exc)
            except Exception as exc:  # an upstream that cannot listen honors nothing; the others still relay
                if not ready.is_set():
                    logger.info("upstream %r did not take a listen request: %s", upstream.name, exc)
                    ready.set()
                    return
                logger.info("upstream %r's listen stream failed: %s", upstream.name, exc)
            finally:
                ready.set()
            await out.send(ending)


def _union(plans: Sequence[_Plan]) -> mt.SubscriptionFilter:
    """What the caller is acknowledged: what the upstreams honored, URIs under the caller's names."""
    honored = [plan.honored for plan in plans if plan.honored is not None]
    uris = [
        plan.uris.get(uri, uri)
        for plan in plans
        if plan.honored is not None
        for uri in plan.honored.resource_subscriptions or ()
    ]
    return mt.SubscriptionFilter(
        tools_list_changed=True if any(h.tools_list_changed for h in honored) else None,
        prompts_list_changed=True if any(h.prompts_list_changed for h in honored) else None,
        resources_list_changed=True if any(h.resources_list_changed for h in honored) else None,
        resource_subscriptions=uris or None,
    )


def install_listen(server: FastMCP[Any], upstreams: Sequence[Relayed], route_uri: RouteUri) -> Listens:
    """`subscriptions/listen` on the gateway's server, and its 2026-07-28 discovery narrowed to what the
    upstreams deliver."""
    listens = Listens(upstreams, route_uri)
    # Private (fastmcp 4.2.3): FastMCP has no API for the method; its low-level server does, and serving it
    # is what makes the MCP SDK declare `listChanged` and `resources.subscribe` on 2026-07-28.
    low = server._mcp_server
    low.add_request_handler("subscriptions/listen", mt.SubscriptionsListenRequestParams, listens)
    derive = low.get_capabilities

    def get_capabilities(*args: Any, protocol_version: str | None = None, **kwargs: Any) -> mt.ServerCapabilities:
        capabilities = derive(*args, protocol_version=protocol_version, **kwargs)
        if protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return capabilities
        delivers = delivered(upstreams)
        update: dict[str, Any] = {}
        if capabilities.tools is not None:
            update["tools"] = capabilities.tools.model_copy(update={"list_changed": delivers.tools})
        if capabilities.prompts is not None:
            update["prompts"] = capabilities.prompts.model_copy(update={"list_changed": delivers.prompts})
        if capabilities.resources is not None:
            update["resources"] = capabilities.resources.model_copy(
                update={"list_changed": delivers.resources, "subscribe": delivers.subscribe}
            )
        return capabilities.model_copy(update=update)

    # The SDK's discovery handler reads the capabilities through this method of the server instance.
    low.get_capabilities = get_capabilities  # type: ignore[method-assign]
    return listens
