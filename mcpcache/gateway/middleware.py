"""The gateway's FastMCP middleware: stamps declared tools' answers, answers not-modified, and serves from
the shared store. It only translates and does I/O; `mcpcache.gateway.decisions` and
`mcpcache.server.decisions` decide.

A declared tool's call goes one of two ways (`decide_store`):

- direct: the call goes upstream (with the caller's tag, if any, forwarded: an upstream that stamps its
  own tags answers not-modified itself), and the answer is stamped with a tag, its own or the hash of
  what upstream answered; a caller that sent that tag gets a not-modified reply instead;
- through the store: a `ToolCache` per caller partition over the shared store asks the same upstream leg
  (`_UpstreamConnection`), so a fresh entry is served without calling upstream, by any replica, and a
  stale one is revalidated with its tag (the upstream runs, the gateway compares, the store's copy is
  kept). The caller then gets the stored answer, or a not-modified reply if it sent the same tag, or, if
  it holds an older answer and accepts deltas, the change only (`mcpcache.gateway.deltas`).

Tools that are not declared are left to FastMCP's proxy untouched: the caller's request `_meta` goes
upstream as it came and the upstream's answer comes back as it went.

How the upstream call carries the tag the gateway chooses: FastMCP's `ProxyTool` forwards the `_meta` of
the request context bound in `fastmcp.server.dependencies.fastmcp_request_ctx` (a public export). The
leg binds a copy of the caller's context whose `_meta` has the cache block replaced, for the one call;
tests/gateway/test_gateway.py fails if a FastMCP release stops forwarding it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

import mcp_types as mt
from cachetools import LRUCache
from fastmcp.server.auth import AccessToken
from fastmcp.server.dependencies import FastMCPRequestContext, fastmcp_request_ctx, get_access_token
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import RawStructuredToolResult, Tool, ToolResult

from mcpcache.canonical import CanonicalizationError
from mcpcache.client.cache import ToolCache
from mcpcache.client.policy import DEFAULT_MAX_ANSWER_BYTES, reply_block
from mcpcache.client.settings import CacheSettings
from mcpcache.etag import content_tag
from mcpcache.gateway.decisions import (
    ANONYMOUS_PARTITION,
    AskAgainWithoutTag,
    Direct,
    PartitionBy,
    Principal,
    Route,
    TagFromAnswer,
    TagFromUpstream,
    UpstreamNotModified,
    UseStore,
    client_ttl_ms,
    decide_store,
    forwarded_tag,
    partition_of,
    read_upstream,
)
from mcpcache.gateway.deltas import GatewayDeltas
from mcpcache.gateway.front import FrontHit, FrontTier, front_key
from mcpcache.gateway.telemetry import GatewayTelemetry
from mcpcache.protocol import (
    META_KEY,
    NO_CONDITIONS,
    CacheBlock,
    Conditions,
    DeltaReply,
    NotModifiedReply,
    conditional_request_meta,
    read_conditions,
    requested_etag,
    weak_equal,
    with_block,
)
from mcpcache.server.decisions import (
    AfterBody,
    Answer,
    AnswerNotModified,
    SendAsIs,
    Stamp,
    decide_after_body,
    decide_block,
    not_modified_kind,
)
from mcpcache.server.fastmcp import read_tool_answer
from mcpcache.server.policies import CachePolicy
from mcpcache.server.stubs import NO_OUTPUT_SCHEMA, StubCheck, StubChecks
from mcpcache.stores.base import Store

__all__ = ["GatewayMiddleware", "PartitionCaches", "current_principal", "gateway_cache_settings", "principal_of"]

logger = logging.getLogger("mcpcache.gateway")

DEFAULT_KEEP_STALE_S = 3600.0


def gateway_cache_settings(
    *, meta_key: str = META_KEY, decoded_bytes: int, max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
) -> CacheSettings:
    """The settings every partition's `ToolCache` shares (`PartitionCaches`).

    Trusted, with every declared tool a read (see _UpstreamConnection.read_only): an upstream error on one
    call must not end the freshness of every other entry of the partition. Stale windows are handed on to the
    callers' caches, which serve stale themselves: serving stale here would hand a stale answer on as if it
    were fresh, with a fresh ttl."""
    return CacheSettings(
        share_public=True,
        trusted=True,
        meta_key=meta_key,
        keep_stale_s=DEFAULT_KEEP_STALE_S,
        decoded_tier_bytes=decoded_bytes,
        max_answer_bytes=max_answer_bytes,
        serve_stale=False,
    )


class PartitionCaches:
    """One `ToolCache` per caller partition over the one shared store, the least recently used dropped first.

    A `ToolCache` serves one partition; dropping one loses nothing stored (the store keeps it), only its
    decoded copies and its in-flight bookkeeping, which callers already waiting on keep a hold of.
    """

    def __init__(
        self,
        store: Store,
        *,
        settings: CacheSettings,
        partitions: int,
        clock: Callable[[], float] = time.monotonic,
        tracer_provider: Any | None = None,
        meter_provider: Any | None = None,
    ) -> None:
        """`settings`: every partition's cache's (`gateway_cache_settings`); `tracer_provider`,
        `meter_provider`: the OpenTelemetry providers of the partitions' caches (None: the global ones, once
        set)."""
        self.store = store
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.settings = settings
        # Callers the gateway cannot identify may send the upstream credentials of their own
        # (forward_headers): what the upstream calls private is not theirs to share.
        self._anonymous_settings = dataclasses.replace(settings, keep_private=False)
        self.meta_key = settings.meta_key
        self.max_answer_bytes = settings.max_answer_bytes
        decoded_bytes = settings.tier_bytes
        self._caches: LRUCache[str, ToolCache] = LRUCache(maxsize=partitions)
        self.front = FrontTier(decoded_bytes // 4) if decoded_bytes > 0 else None
        """Fresh hits this replica serves again without asking the store, for up to a second (`front`)."""
        self.clock = clock

    def get(self, partition: str) -> ToolCache:
        cache = self._caches.get(partition)
        if cache is None:
            settings = self._anonymous_settings if partition == ANONYMOUS_PARTITION else self.settings
            cache = ToolCache(
                self.store,
                settings,
                partition=partition,
                tracer_provider=self.tracer_provider,
                meter_provider=self.meter_provider,
            )
            self._caches[partition] = cache
        return cache


def principal_of(token: AccessToken) -> Principal:
    """What a verifier vouched for in an access token (FastMCP's `StaticTokenVerifier`, `JWTVerifier`...)."""
    issuer = token.claims.get("iss") if isinstance(token.claims, Mapping) else None
    return Principal(
        token=token.token,
        client_id=token.client_id or "",
        subject=token.subject,
        issuer=issuer if isinstance(issuer, str) else None,
        scopes=tuple(token.scopes),
    )


def current_principal() -> Principal | None:
    """The caller as the gateway's own auth verified it; None when there is no verified token."""
    token = get_access_token()
    return None if token is None else principal_of(token)


def _read_answer(result: ToolResult) -> Answer | None:
    """The answer to tag, or None for a result sent as it is (a request for input; a Prefab payload, whose
    tool references the gateway's own FastMCP rewrites after this layer)."""
    read = read_tool_answer(result)
    return read if isinstance(read, Answer) else None


def _as_call_result(result: ToolResult) -> mt.CallToolResult:
    return mt.CallToolResult(
        content=result.content,
        structured_content=result.structured_content,
        is_error=result.is_error,
        _meta=result.meta,
    )


_SAME: Any = object()


def _as_tool_result(result: mt.CallToolResult, meta: dict[str, Any] | None = _SAME) -> ToolResult:
    """`result` as FastMCP's ToolResult, with `meta` in place of its own when given."""
    # Constructed without ToolResult.__init__, which would convert and serialise a multi-megabyte answer
    # again; it is already in wire form. A non-object structuredContent needs FastMCP's raw class, as
    # its proxy uses for the same case.
    kind = ToolResult if result.structured_content is None or isinstance(result.structured_content, dict) else None
    fields: dict[str, Any] = {
        "content": list(result.content),
        "structured_content": result.structured_content,
        "meta": result.meta if meta is _SAME else meta,
        "is_error": result.is_error,
    }
    if kind is None:
        return RawStructuredToolResult.model_construct(**fields)
    return ToolResult.model_construct(**fields)


def _not_modified(reply: NotModifiedReply) -> ToolResult:
    return ToolResult.model_construct(
        content=[], structured_content=reply.structured_content, meta=reply.meta, is_error=False
    )


def _delta(reply: DeltaReply) -> ToolResult:
    return ToolResult.model_construct(
        content=[], structured_content=reply.structured_content, meta=reply.meta, is_error=False
    )


def _unanswerable(name: str) -> ToolResult:
    text = f"The upstream answered 'not modified' to a call of {name!r} that carried no tag, so there is no answer."
    return ToolResult.model_construct(
        content=[mt.TextContent(type="text", text=text)], structured_content=None, meta=None, is_error=True
    )


class _NotAToolAnswer(Exception):
    """The upstream answered with something other than a tool result (it asks the caller for input)."""

    def __init__(self, result: ToolResult) -> None:
        super().__init__("not a tool answer")
        self.result = result


class _CallersCopyConfirmed(Exception):
    """The store held nothing to revalidate with, so the caller's own tag went upstream, and the upstream
    confirmed it: the caller's copy is current, and there is no answer to keep. Raised out of the partition's
    cache (which cannot keep a confirmation of a copy it does not hold) to the call it belongs to."""

    def __init__(self, reply: ToolResult, tag: str) -> None:
        super().__init__("the caller's copy is current")
        self.reply = reply
        self.tag = tag


# What the upstream leg brought back ----------------------------------------------------------------


@dataclass(frozen=True)
class _Whole:
    """The upstream's whole answer, the policy it is stamped under and its tag (None: it goes untagged).
    A full answer received is always what is served and kept: a tag never stands in for a body in hand."""

    result: ToolResult
    answer: Answer
    policy: CachePolicy
    tag: str | None


@dataclass(frozen=True)
class _Confirmed:
    """The upstream itself answered not-modified to the tag sent with the call (`reply`, stamped)."""

    reply: ToolResult
    tag: str


@dataclass(frozen=True)
class _Relayed:
    """Nothing to stamp (a request for input, a payload the gateway's FastMCP rewrites, an upstream that
    answers not-modified to an unconditional call): goes to the caller as it is."""

    result: ToolResult


_Fetched = _Whole | _Confirmed | _Relayed


class _Leg:
    """One caller's call of one declared tool, and the upstream call(s) it makes."""

    def __init__(
        self,
        route: Route,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
        front: FastMCPRequestContext | None,
        meta_key: str,
        telemetry: GatewayTelemetry,
        stub: StubCheck = NO_OUTPUT_SCHEMA,
    ) -> None:
        """`stub`: the tool's output schema as the upstream lists it, which the stub of a reply to the
        caller must pass."""
        self.route = route
        self.context = context
        self.call_next = call_next
        self.front = front
        self.meta_key = meta_key
        self.telemetry = telemetry
        self.full: Answer | None = None
        """The whole answer the caller's reply stands for, once the gateway holds one (for the counters)."""
        self.stub = stub

    async def upstream(self, tag: str | None) -> ToolResult:
        """The upstream's answer to the call, sent with `tag` as its only cache block (or none)."""
        if self.front is None:
            result = await self.call_next(self.context)
        else:
            meta = {key: value for key, value in (self.front.meta or {}).items() if key != self.meta_key}
            if tag is not None:
                meta.update(conditional_request_meta(tag, self.meta_key))
            bound = fastmcp_request_ctx.set(dataclasses.replace(self.front, meta=meta or None))
            try:
                result = await self.call_next(self.context)
            finally:
                fastmcp_request_ctx.reset(bound)
        self.telemetry.received(self.route, result)
        return result

    async def fetch(self, forwarded: str | None) -> _Fetched:
        """The upstream's answer to the call sent with `forwarded` (a tag of the caller's or the store's, or
        None): whole, a confirmation of `forwarded`, or something to relay."""
        settings = self.route.settings
        name = self.route.public_name
        while True:
            result = await self.upstream(forwarded)
            answer = _read_answer(result)
            if answer is None:
                return _Relayed(result)  # a request for input goes back to the caller as it came
            block = reply_block(result.meta, self.meta_key)
            trust = self.route.trust_tags
            reading = read_upstream(settings, block, forwarded, is_error=answer.is_error, trust_tags=trust)
            logger.debug("tool %r: %s", name, reading.reason)
            match reading:
                case AskAgainWithoutTag():
                    if forwarded is None:
                        return _Relayed(_unanswerable(name))
                    forwarded = None
                    continue
                case UpstreamNotModified(policy=policy, tag=tag):
                    kind = not_modified_kind(name, policy, result.structured_content)
                    reply = NotModifiedReply.build(decide_block(policy, tag), kind, self.meta_key)
                    return _Confirmed(_not_modified(reply), tag)
                case TagFromUpstream(policy=policy, tag=upstream_tag):
                    return _Whole(result, answer, policy, upstream_tag)
                case TagFromAnswer(policy=policy):
                    own_tag = self._hash(answer) if policy.etag and not answer.is_error else None
                    return _Whole(result, answer, policy, own_tag)
                case _:
                    assert_never(reading)

    def for_caller(self, fetched: _Fetched, requested: str | None) -> ToolResult:
        """What a caller holding `requested` is sent: the whole answer stamped, or a not-modified reply when
        its tag is the answer's (the upstream's confirmation is one only of the tag that was forwarded)."""
        match fetched:
            case _Whole(result=result, answer=answer, policy=policy, tag=tag):
                name = self.route.public_name
                self.full = answer
                after = decide_after_body(name, policy, requested, tag, answer, meta_key=self.meta_key, stub=self.stub)
                return self.apply(after, result)
            case _Confirmed(reply=reply):
                return reply
            case _Relayed(result=result):
                return result
            case _:
                assert_never(fetched)

    async def answer(self, requested: str | None) -> ToolResult:
        """The upstream's answer stamped for a caller holding `requested`: stamped, or a not-modified reply."""
        fetched = await self.fetch(forwarded_tag(self.route.settings, requested, trust_tags=self.route.trust_tags))
        if isinstance(fetched, _Confirmed) and (refused := self.refusal(fetched.reply)) is not None:
            # The upstream confirmed the caller's tag with a stub the tool's schema refuses: the caller may
            # not be sent it, and the gateway holds no answer of its own, so it asks for the answer.
            logger.debug(
                "tool %r: the upstream confirmed the tag, but %s; asked again for the answer",
                self.route.public_name,
                refused,
            )
            fetched = await self.fetch(None)
        return self.for_caller(fetched, requested)

    def refusal(self, reply: ToolResult) -> str | None:
        """Why the stub of a not-modified reply may not go to the caller (None: it may)."""
        kind = reply.structured_content.get("kind") if isinstance(reply.structured_content, dict) else None
        return self.stub.refusal(kind) if isinstance(kind, str) else None

    def _hash(self, answer: Answer) -> str | None:
        try:
            return content_tag(answer.content, answer.structured_content, answer.meta, meta_key=self.meta_key)
        except CanonicalizationError as exc:
            logger.warning("tool %r: answer has no canonical form (%s); sent without a tag", self.route.tool, exc)
            return None

    def apply(self, after: AfterBody, result: ToolResult) -> ToolResult:
        logger.debug("tool %r: %s", self.route.public_name, after.reason)
        match after:
            case SendAsIs():
                return result
            case Stamp(block=block):
                return result.model_copy(update={"meta": with_block(result.meta, block, self.meta_key)})
            case AnswerNotModified(reply=reply):
                return _not_modified(reply)
            case _:
                assert_never(after)


class _UpstreamConnection:
    """The `Connection` a partition's `ToolCache` calls upstream through: the leg, sent with the cache's tag
    (or, when the cache holds none, the caller's), answering the cache with the upstream's whole answer
    stamped, or with the upstream's confirmation of the cache's tag."""

    timeout_s: float | None = None

    def __init__(self, leg: _Leg, era: str, requested: str | None, meta_key: str, declared: Mapping[str, Any]) -> None:
        self.leg = leg
        self._declared = declared
        self.server_id = leg.route.server_id
        self.era = era
        self.requested = requested
        """The tag the caller holds (None: none), sent upstream when the cache has none of its own."""
        self.meta_key = meta_key
        self._other: ToolResult | None = None

    async def send(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None, timeout_s: float | None
    ) -> mt.CallToolResult | None:
        settings = self.leg.route.settings
        cached = requested_etag(meta, self.meta_key)
        fetched = await self.leg.fetch(
            forwarded_tag(settings, cached or self.requested, trust_tags=self.leg.route.trust_tags)
        )
        match fetched:
            case _Relayed(result=result):
                self._other = result
                return None
            case _Confirmed(reply=reply, tag=tag):
                if cached is None:
                    raise _CallersCopyConfirmed(reply, tag)
                return _as_call_result(reply)  # the cache matches it against the tag it sent
            case _Whole():
                # Stamped as for a caller holding nothing: the cache keeps and serves what was received.
                return _as_call_result(self.leg.for_caller(fetched, None))
            case _:
                assert_never(fetched)

    async def send_plain(self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None) -> mt.CallToolResult:
        assert self._other is not None
        raise _NotAToolAnswer(self._other)

    async def validate(self, name: str, result: mt.CallToolResult) -> None:
        """The gateway relays answers; the caller checks them against the tool's schema itself."""

    async def read_only(self, name: str) -> bool | None:
        # Declaring a tool in the gateway's configuration declares it a read: its answers may be kept.
        return True

    async def idempotent(self, name: str) -> bool | None:
        return True  # a read

    async def declarations(self) -> Mapping[str, Any] | None:
        # The configuration's key arguments for this upstream's tools (by the upstream's names, which the
        # partition caches call them by); the upstream's own declarations are not what the gateway keys on.
        return self._declared


class GatewayMiddleware(Middleware):
    """Stamps, revalidates and serves the declared tools of the gateway's upstreams (module docstring)."""

    def __init__(
        self,
        routes: Mapping[str, Route],
        *,
        caches: PartitionCaches | None = None,
        partition_by: PartitionBy = "principal",
        meta_key: str = META_KEY,
        deltas: GatewayDeltas | None = None,
        meter_provider: Any | None = None,
    ) -> None:
        """`deltas`: the delta replies, with their history in the store `caches` use (None: none sent).
        `meter_provider`: the OpenTelemetry meter provider to count on (None: the global one, once set)."""
        self.routes = dict(routes)
        self.caches = caches
        self.partition_by: PartitionBy = partition_by
        self.meta_key = meta_key
        self.deltas = deltas if caches is not None else None
        self.telemetry = GatewayTelemetry(meter_provider, meta_key=meta_key)
        self.stubs = StubChecks()
        """Whether each tool's output schema (as its upstream lists it) accepts the stub, per schema."""
        self._declared: dict[str, dict[str, Any]] = {}
        """By upstream identity, the key arguments its routes declare, by the upstream's tool name."""
        for route in self.routes.values():
            if route.key_rule is not None:
                self._declared.setdefault(route.server_id, {})[route.tool] = route.key_rule.block()

    async def on_list_tools(
        self,
        context: MiddlewareContext[mt.ListToolsRequest],
        call_next: CallNext[mt.ListToolsRequest, Sequence[Tool]],
    ) -> Sequence[Tool]:
        """The declared tools' key arguments, in the cache declaration callers read (the configuration's, in
        place of any the upstream lists); every other tool as the upstream listed it."""
        tools = await call_next(context)
        if not self._declared:
            return tools
        listed: list[Tool] = []
        for tool in tools:
            route = self.routes.get(tool.name)
            if route is None or route.key_rule is None:
                listed.append(tool)
                continue
            meta = dict(tool.meta or {})
            meta[self.meta_key] = route.declared(meta.get(self.meta_key))
            # A copy: the listed tool object is FastMCP's (its proxy's) and must not change.
            listed.append(tool.model_copy(update={"meta": meta}))
        return listed

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        route = self.routes.get(context.message.name)
        if route is None:
            return await call_next(context)
        front = fastmcp_request_ctx.get()
        settings = route.settings
        conditions = read_conditions(front.meta if front else None, self.meta_key) if settings.etag else NO_CONDITIONS
        requested = conditions.etag
        # Only a caller that sends a tag can be answered with a stub: only then is the schema looked up (in
        # the listing FastMCP's proxy keeps of the upstream's tools, as it does for the call itself).
        stub = await self._stub_check(context, route) if requested is not None else NO_OUTPUT_SCHEMA
        leg = _Leg(route, context, call_next, front, self.meta_key, self.telemetry, stub)
        plan = decide_store(self.caches is not None, partition_of(current_principal(), self.partition_by), settings)
        logger.debug("tool %r: %s", route.public_name, plan.reason)
        match plan:
            case Direct():
                reply = await leg.answer(requested)
            case UseStore(partition=partition):
                assert self.caches is not None
                era = route.era or (front.protocol_version if front is not None else "unknown")
                reply = await self._through_store(leg, partition, era, conditions)
            case _:
                assert_never(plan)
        self.telemetry.sent(route, reply, leg.full)
        return reply

    async def _stub_check(self, context: MiddlewareContext[mt.CallToolRequestParams], route: Route) -> StubCheck:
        fctx = context.fastmcp_context
        tool = None
        if fctx is not None:
            try:
                tool = await fctx.fastmcp.get_tool(route.public_name)
            except Exception:  # the upstream cannot list its tools now: the call itself will say so
                logger.debug("tool %r: could not look up its output schema", route.public_name, exc_info=True)
        if tool is None:
            return StubCheck.unknown("the gateway could not look the tool up in its upstream's listing")
        return self.stubs.get(route.public_name, tool.output_schema)

    async def _through_store(self, leg: _Leg, partition: str, era: str, conditions: Conditions) -> ToolResult:
        caches = self.caches
        assert caches is not None
        route = leg.route
        requested = conditions.etag
        arguments = leg.context.message.arguments
        front = caches.front
        keyed = route.keyed(arguments)
        key = front_key(partition, route.server_id, era, route.tool, keyed) if front is not None else None
        if front is not None and key is not None:
            held = front.get(key, caches.clock())
            if isinstance(held, FrontHit):
                logger.debug("tool %r: front: fresh_hit (%s)", route.public_name, held.reason)
                return await self._from_store(
                    leg, partition, era, conditions, held.result, held.fresh_for_ms, held.block, key[-1]
                )
        conn = _UpstreamConnection(leg, era, requested, self.meta_key, self._declared.get(route.server_id, {}))
        try:
            result, outcome = await caches.get(partition).execute(conn, route.tool, arguments)
        except _NotAToolAnswer as other:
            return other.result
        except _CallersCopyConfirmed as confirmed:
            # Raised to every caller that shared the call in flight: a confirmation only of its own copy.
            if requested is not None and weak_equal(requested, confirmed.tag):
                if leg.refusal(confirmed.reply) is None:
                    return confirmed.reply
                return await leg.answer(None)  # a stub the schema refuses never goes: the answer does
            return await leg.answer(requested)
        logger.debug("tool %r: store: %s (%s)", route.public_name, outcome.status, outcome.reason)
        block = reply_block(result.meta, self.meta_key)
        if front is not None and key is not None:
            front.record(key, result, outcome, caches.clock(), block)
        fresh_for = outcome.fresh_for_ms if outcome.status == "fresh_hit" else None
        canonical = key[-1] if key is not None else None
        return await self._from_store(leg, partition, era, conditions, result, fresh_for, block, canonical)

    async def _from_store(
        self,
        leg: _Leg,
        partition: str,
        era: str,
        conditions: Conditions,
        result: mt.CallToolResult,
        fresh_for: int | None,
        block: CacheBlock | None,
        canonical: bytes | None,
    ) -> ToolResult:
        """An answer from the store, stamped for a caller with `conditions` (a not-modified reply, a delta, or
        the answer), with what is left of its freshness (`fresh_for`, a fresh hit's) as its ttl. `block`: the
        answer's cache block as `reply_block` reads it; `canonical`: the canonical JSON of the call's keyed
        arguments (`front_key`'s last part), when known."""
        requested = conditions.etag
        if result.is_error or block is None:
            return _as_tool_result(result)
        route = leg.route
        policy = CachePolicy(
            ttl_ms=client_ttl_ms(block.ttl_ms, fresh_for) or 0,
            scope=block.cache_scope,
            kind=route.settings.kind,
            etag=block.etag is not None,
            deltas=route.settings.deltas,
            # The windows start when freshness ends, so they are handed on as they were stamped.
            stale_while_revalidate_ms=block.stale_while_revalidate_ms or 0,
            stale_if_error_ms=block.stale_if_error_ms or 0,
        )
        answer = Answer(result.content, result.structured_content, False, result.meta)
        leg.full = answer
        after = decide_after_body(
            route.public_name, policy, requested, block.etag, answer, meta_key=self.meta_key, stub=leg.stub
        )
        if self.deltas is not None:
            arguments = leg.context.message.arguments
            call = self.deltas.call_key(route, partition, era, arguments, block.cache_scope, canonical)
            reply = await self.deltas.reply(route, call, conditions, policy, after, result, stub=leg.stub)
            if reply is not None:
                return _delta(reply)
        if isinstance(after, Stamp):  # one model built, not one to convert and another to stamp
            logger.debug("tool %r: %s", route.public_name, after.reason)
            return _as_tool_result(result, with_block(result.meta, after.block, self.meta_key))
        return leg.apply(after, _as_tool_result(result))
