"""The client half's driver: `ToolCache.execute` answers one call from the cache or the server.

It asks `mcpcache.client.policy` what to do, does the I/O it was told to do through a `Connection` (the only
thing a wrapper provides) and the fenced store, and reports an outcome. The call's path, state by state
with the transitions out of each, is drawn in `mcpcache.client.path`; this module walks it. The driver
builds and owns its parts, each handed what it uses (their shared state is one `Shelf`): the lookup
(`lookup.Reader`), keeping answers (`keeping.Keeping`), the stale windows (`stale.StaleServing`, handed the
driver's send and finish steps) and invalidation, freshness ends, clearing and listing
(`managing.Managing`). Around it: outcomes and stats (`outcomes`), stored answers (`entries`), single flight
(`flights`), the failing-store fence (`mcpcache.stores.fence`).

Where two writers meet, the store decides atomically: a save never replaces an entry whose request was
sent later (`Item.stamp`), and a revalidation freshens the stored entry only if it still holds the tag
that was sent (`update_meta(if_tag=...)`). The caller is always served the copy whose tag it sent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import replace
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, assert_never, cast, overload

import anyio
from cachetools import LRUCache
from mcp_types import CallToolResult

from mcpcache.canonical import CanonicalizationError
from mcpcache.client.background import Deferred
from mcpcache.client.contracts import Connection, Declaring
from mcpcache.client.entries import Found, merged
from mcpcache.client.flights import Flights
from mcpcache.client.keeping import Keeping
from mcpcache.client.keyrules import KeyRules
from mcpcache.client.keys import CallIdentity, NamedCall, plain_arguments, readable_server
from mcpcache.client.leaves import LeafMemo
from mcpcache.client.lookup import Reader
from mcpcache.client.managing import Managing, remember
from mcpcache.client.outcomes import CacheStats, CallOutcome, Status
from mcpcache.client.patching import Patched, Unpatched, patch_answer
from mcpcache.client.path import Looked, Unserved, unanswerable
from mcpcache.client.policy import (
    CACHE_MODES,
    ApplyDelta,
    CacheMode,
    Fetch,
    JoinFlight,
    RepeatWithoutTag,
    ReturnUnstored,
    Revalidate,
    SendOwn,
    ServeFresh,
    ServeStored,
    StoreAnswer,
    decide_join,
    decide_reply,
    delta_formats,
    may_share,
    reply_block,
)
from mcpcache.client.resend import sent_with_resend
from mcpcache.client.settings import CacheSettings
from mcpcache.client.shelf import Clock, Shelf
from mcpcache.client.stale import Background, StaleServing
from mcpcache.client.telemetry import ClientTelemetry
from mcpcache.client.tier import DecodedTier
from mcpcache.client.views import view_of
from mcpcache.protocol import conditional_request_meta
from mcpcache.sizes import bytes_saved, result_bytes
from mcpcache.stores.base import Store
from mcpcache.stores.fence import FencedStore
from mcpcache.stores.opening import TOOLS_FILE, default_store

if TYPE_CHECKING:
    from fastmcp import Client as FastMCPClient
    from mcp import Client as MCPClient
    from mcp import ClientSession

    from mcpcache.client.fastmcp import CachedFastMCPClient
    from mcpcache.client.inventory import CachedEntry
    from mcpcache.client.wrappers import CachedMCPClient, CachedSession

__all__ = ["CacheStats", "CallOutcome", "ToolCache"]

logger = logging.getLogger("mcpcache.client")


class ToolCache:
    """A private cache for MCP tool results.

    store: where answers are kept (default: a SQLite file in the user's cache directory; `close()` closes only
        a store the cache opened itself).
    settings: how the cache behaves (`CacheSettings`, documented field by field); the defaults when None.
    partition: the authorization context the answers belong to (derive it from a verified credential).
    clock: the wall clock freshness is judged by (seconds since the epoch; `time.time` by default). Tests pass
        a clock they move by hand; a cache and the processes sharing its store must agree on it.
    tracer_provider, meter_provider: the OpenTelemetry providers for this cache's spans and metrics
        (docs/observability.md); None (the default): the global ones, once the application sets them.
    """

    def __init__(
        self,
        store: Store | None = None,
        settings: CacheSettings | None = None,
        *,
        partition: str = "",
        clock: Clock = time.time,
        tracer_provider: Any | None = None,
        meter_provider: Any | None = None,
    ) -> None:
        if not isinstance(partition, str):
            raise TypeError("partition must be a string")
        if settings is None:
            settings = CacheSettings()
        elif not isinstance(settings, CacheSettings):
            raise TypeError(f"settings must be a CacheSettings, got {type(settings).__name__}")
        self.settings = settings
        self.store = store if store is not None else default_store(TOOLS_FILE)
        self._owns_store = store is None
        """`close()` closes only a store this cache opened itself (the default one)."""
        self.partition = partition
        self.clock = clock
        self.stats = CacheStats()
        self._telemetry = ClientTelemetry(tracer_provider, meter_provider)
        fenced = FencedStore(
            self.store,
            who="tool cache store",
            meanwhile="calls go on without the cache",
            logger=logger,
            on_failure=self._count_store_failure,
            settings=settings.fence,
            most_bytes=settings.max_answer_bytes,
        )
        shelf = Shelf(
            settings,
            partition,
            clock,
            self.store,
            fenced,
            DecodedTier(settings.tier_bytes),
            Deferred.of(self.store),
            LeafMemo(),
            LRUCache(maxsize=4096),
            self.stats,
        )
        self._shelf = shelf
        self._store, self._tier, self._leaves, self._deferred = fenced, shelf.tier, shelf.leaves, shelf.deferred
        self._key_rules = KeyRules(settings.key_rules, trusted=settings.trusted)
        self._flights = Flights()
        self._background = Background(settings.background_revalidations)
        # The parts: each is handed what it uses, and none calls back into the driver but through what it
        # was handed (stale serving: the send and finish steps).
        self._managing = Managing(shelf, self._key_rules)
        self._reader = Reader(shelf, self._managing)
        self._keeping = Keeping(shelf, self._managing)
        self._stale = StaleServing(
            shelf, self._reader, self._key_rules, self._background, send=self._send, finish=self._finish
        )
        self._named: dict[tuple[Any, ...], tuple[CallIdentity, str]] = {}
        """The identity and private key of calls of plain arguments keyed on every argument, by (server, era,
        tool, variant, `plain_arguments`), the oldest going first past `_MAX_REMEMBERED`: a fresh hit of a
        call made before names it without building and hashing it again (`fresh_hit`)."""

    @property
    def meta_key(self) -> str:
        """The `_meta` key of the cache block (`CacheSettings.meta_key`)."""
        return self.settings.meta_key

    # -- seeing and managing what is cached: `Managing`'s -------------------------------------------

    async def invalidate(
        self,
        tool: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        *,
        server_id: str,
        declaring: Declaring | None = None,
    ) -> None:
        """Never serve again, without asking the server, what is cached for one call on `server_id` (`tool`
        with `arguments`; None is no arguments, as in `call_tool`), or with no tool for every call on it.

        Works as a mutation does (see `decide_join`): the freshness of what the call (or the server) has
        cached in this partition ends now, in this process and in the store, so an answer to a request sent
        before the invalidation, landing after it, is never served as fresh, and no later call shares such a
        request. The entries this process can name and their decoded copies are dropped as well (for the
        server, its entries in every partition), so the next call asks for the whole answer.

        `server_id` is the view's (`cached.server_id`); a view's own `invalidate` fills it in, and passes
        itself as `declaring`, so that the server's key arguments are read (listed once) before the call is
        named: without them, a cache that has called nothing yet would end only the entry keyed on every
        argument, not the one other caches keep under the key arguments. Like a call,
        it never raises for a failing store: this process honours the invalidation regardless, and other
        processes sharing the store learn of it only if the store recorded it.
        """
        await self._managing.invalidate(tool, arguments, server_id=server_id, declaring=declaring)

    async def end_freshness(self, server_id: str, era: str | None = None) -> None:
        """End the freshness of every entry of `server_id` in this partition (their tags stay usable)."""
        await self._managing.end_freshness(server_id, era)

    async def clear(self) -> int:
        """Remove every tool answer the store holds (every server, every partition); returns how many.

        The freshness marks stay, so nothing cached before is ever taken for fresh again, and in this process
        no call shares a request sent before the clear. A failing store raises: unlike a call, a clear that
        did not happen must not look as if it had.
        """
        return await self._managing.clear()

    def entries(self, *, server: str | None = None, tool: str | None = None) -> AsyncIterator[CachedEntry]:
        """What the store holds, a page at a time, each as a person reads it (see `mcpcache cache ls`):
        `server` is an entry's readable server label, as listed."""
        return self._managing.entries(server=server, tool=tool)

    def _count_store_failure(self) -> None:
        self.stats.store_failures += 1
        self._telemetry.store_failure(type(self.store).__name__)

    def forget_validations(self) -> None:
        """Check stored answers again before serving them, and read the tools' key arguments again (the
        wrappers call it when tools change)."""
        self._shelf.validated.clear()
        self._key_rules.forget()

    @overload
    def wrap(self, client: MCPClient, *, server_id: str | None = None) -> CachedMCPClient: ...

    @overload
    def wrap(self, client: ClientSession, *, server_id: str | None = None) -> CachedSession: ...

    @overload
    def wrap(self, client: FastMCPClient[Any], *, server_id: str | None = None) -> CachedFastMCPClient: ...

    def wrap(
        self, client: MCPClient | ClientSession | FastMCPClient[Any], *, server_id: str | None = None
    ) -> CachedMCPClient | CachedSession | CachedFastMCPClient:
        """A caching view of `client` (an `mcp.Client`, an `mcp.ClientSession` or a `fastmcp.Client`).

        server_id: name the server the client talks to, so that other connections to the same server share
        its entries. Without it the server is named by its endpoint (a URL, or a stdio command with its
        arguments, working directory and environment); a bare `ClientSession` has no endpoint to name, so
        its entries are not shared beyond that connection.
        """
        view = view_of(self, client, server_id)
        return cast("CachedMCPClient | CachedSession | CachedFastMCPClient", view)

    async def flush(self) -> None:
        """Wait for the revalidations this cache runs in the background (for answers it served stale) to land,
        then for the store writes it started beside its calls (a revalidation records the server's
        confirmation after the answer is returned). `close()` does it too."""
        await self._background.wait()
        await self._deferred.flush()

    async def close(self) -> None:
        """Cancel and await the revalidations running in the background, wait for this cache's pending store
        writes, then close the store if this cache opened it (the default SQLite file); a store you passed
        stays open."""
        await self._background.close()
        await self._deferred.flush()
        if self._owns_store:
            await self.store.close()

    async def __aenter__(self) -> ToolCache:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- the driver ---------------------------------------------------------------------------------

    async def execute(
        self,
        conn: Connection,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        mode: CacheMode = "use",
        meta: Mapping[str, Any] | None = None,
        variant: str = "",
        named: NamedCall | None = None,
    ) -> tuple[CallToolResult, CallOutcome]:
        """Answer one call, from the cache or the server. Returns the result and what was done.

        named: the call as `fresh_hit` named it an instant before (a view's fast path, which missed): it is
        neither named nor checked for a fresh hit without awaiting again."""
        span = self._telemetry.begin(name)
        try:
            if not self._telemetry.own(span):
                result, outcome = await self._answer(conn, name, arguments, mode, meta, variant, named)
            else:
                with self._telemetry.inside(span):
                    result, outcome = await self._answer(conn, name, arguments, mode, meta, variant, named)
        except BaseException as exc:
            self._telemetry.failed(span, exc)
            raise
        self._telemetry.record(span, conn.server_id, name, outcome)
        return result, outcome

    async def _answer(
        self,
        conn: Connection,
        name: str,
        arguments: Mapping[str, Any] | None,
        mode: CacheMode,
        meta: Mapping[str, Any] | None,
        variant: str,
        named: NamedCall | None,
    ) -> tuple[CallToolResult, CallOutcome]:
        try:
            return await self._execute(conn, name, arguments, mode=mode, meta=meta, variant=variant, named=named)
        except Exception as exc:
            served = await self._stale.serve_if_error(conn, name, arguments, mode, variant, exc)
            if served is None:
                raise
            return served

    async def _execute(
        self,
        conn: Connection,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        mode: CacheMode,
        meta: Mapping[str, Any] | None,
        variant: str,
        named: NamedCall | None,
    ) -> tuple[CallToolResult, CallOutcome]:
        if mode not in CACHE_MODES:
            raise ValueError(f"cache mode must be one of {CACHE_MODES}, got {mode!r}")
        user_meta = dict(meta) if meta else None
        rules = self._key_rules
        # Only a trusted server's declarations are awaited (listed once per server); the rest is a dict read.
        rule = await rules.rule(conn, name) if rules.trusted and mode != "bypass" else rules.own.get(name)
        why = "bypass: the cache is not consulted and nothing is stored"
        if named is not None and named.rule is rule:
            # Named by the view's fresh check an instant ago, which found no fresh hit held decoded.
            identity, key, checked = named.identity, named.key, True
        else:
            checked = False
            args = dict(arguments or {})  # the call's own copy: the caller may change its dict meanwhile
            identity = KeyRules.identity(rule, conn.server_id, self.partition, conn.era, name, args, variant)
            try:
                key = identity.key("private")
            except CanonicalizationError as exc:
                mode, why = "bypass", f"not cached: arguments have no canonical form ({exc})"
        if mode == "bypass":
            # Nothing is looked up or kept, but a not-modified reply is still never passed off as an answer.
            left_alone = Looked(None, None, Fetch(store=False, reason=why))
            sent = await self._send(conn, identity, "", mode, user_meta, left_alone, conn.timeout_s)
            return self._finish(identity, *sent)
        if (conn.server_id, conn.era, variant) not in self._managing.variants:
            self._managing.note_variant(conn.server_id, conn.era, variant)

        if mode == "use" and not checked:
            hit = self._reader.fresh_now(identity, key)
            if hit is not None:
                return self._finish(identity, *hit)
        deadline = None if conn.timeout_s is None else anyio.current_time() + conn.timeout_s
        replaced = 0
        while True:
            landed = self._flights.landed(key)
            looked = await self._reader.look(identity, key, mode)
            match looked.decision:
                case ServeFresh():
                    served = await self._reader.serve_fresh(looked)
                    if not isinstance(served, Unserved):
                        return self._finish(identity, *served)
                    replaced += served is Unserved.GONE
                    if served is Unserved.GONE and replaced < _LOOKS_AFTER_A_REPLACEMENT:
                        continue  # another writer's version: judged by its own metadata
                    looked = await self._reader.unserved(looked, served)  # a miss now
                case Revalidate() | Fetch():
                    pass  # the stale window, single flight, then the request
                case _:
                    assert_never(looked.decision)
            stale = await self._stale.serve_while_revalidating(conn, identity, key, mode, user_meta, looked)
            if stale is not None:
                return self._finish(identity, *stale)
            shareable = False
            if mode == "use":
                if self._flights.landed(key) != landed:
                    continue  # an identical call landed during the lookup: what it stored may be fresh
                read_only = None if looked.found is not None else await conn.read_only(name)
                flight = self._flights.current(key)
                join = decide_join(
                    flight.sent_at if flight is not None else None,
                    looked.ended_at,
                    stored=looked.found is not None,
                    read_only=read_only,
                )
                match join:
                    case JoinFlight() if flight is not None:
                        shared = await self._flights.follow(flight, deadline)
                        if shared is not None and may_share(
                            reply_block(shared[0].meta, self.settings.meta_key), self.settings.keep_private
                        ):
                            return self._finish(identity, *shared)
                        continue  # the leader failed for reasons of its own, or its answer is not ours to share
                    case JoinFlight():
                        shareable = True
                    case SendOwn():
                        logger.debug("tool %r: %s", name, join.reason)
                    case _:
                        assert_never(join)
                if self._flights.landed(key) != landed:
                    continue  # the annotations were fetched meanwhile; an identical call may have landed
            return await self._lead(conn, identity, key, mode, shareable, user_meta, looked, deadline)

    async def _lead(
        self,
        conn: Connection,
        identity: CallIdentity,
        key: str,
        mode: CacheMode,
        shareable: bool,
        user_meta: dict[str, Any] | None,
        looked: Looked,
        deadline: float | None,
    ) -> tuple[CallToolResult, CallOutcome]:
        """Send this call for itself and, when it may be shared, for whoever joins it meanwhile."""
        flight = self._flights.start(key, self.clock()) if shareable else None
        try:
            remaining = None if deadline is None else max(deadline - anyio.current_time(), 0.0)
            result, outcome = await self._send(conn, identity, key, mode, user_meta, looked, remaining)
            if flight is not None:
                flight.result, flight.outcome = result, outcome
                flight.size = self._tier.size_of(key)
            return self._finish(identity, result, outcome)
        except BaseException as exc:
            if flight is not None:
                flight.error = exc
            raise
        finally:
            if flight is not None:
                self._flights.land(key, flight)

    def _finish(
        self, identity: CallIdentity, result: CallToolResult, outcome: CallOutcome
    ) -> tuple[CallToolResult, CallOutcome]:
        self.stats.record(outcome)
        if logger.isEnabledFor(logging.DEBUG):
            server = readable_server(identity.server)
            logger.debug("tool %r on %s: %s (%s)", identity.tool, server, outcome.status, outcome.reason)
        return result, outcome

    def fresh_hit(
        self, server_id: str, era: str, name: str, arguments: Mapping[str, Any] | None, variant: str = ""
    ) -> tuple[CallToolResult, CallOutcome] | NamedCall | None:
        """The call answered as a fresh hit without awaiting anything (`Reader.fresh_now`: a store in memory, the
        answer held decoded), with its outcome recorded as `execute` records it. Otherwise the call as named
        here, for `execute(named=...)` to take as it is, or None when its arguments have no canonical form
        (`execute` says so). What the caching views try first, before they build a connection."""
        # The rule known without asking (an override, or declarations listed before); otherwise the key on
        # every argument, whose entry, if any, is this very call's answer too.
        rule = self._key_rules.known(server_id, name)
        plain = plain_arguments(arguments) if arguments is not None else ()
        named = (server_id, era, name, variant, plain)
        known = self._named.get(named) if plain is not None and (rule is None or rule.trivial) else None
        if known is not None:
            identity, key = known
        else:
            identity = KeyRules.identity(rule, server_id, self.partition, era, name, dict(arguments or {}), variant)
            try:
                key = identity.key("private")
            except CanonicalizationError:
                return None
            if plain is not None and not identity.projection:
                remember(self._named, named, (identity, key))
        if (server_id, era, variant) not in self._managing.variants:
            self._managing.note_variant(server_id, era, variant)
        hit = self._reader.fresh_now(identity, key)
        if hit is None:
            return NamedCall(identity, key, rule)
        span = self._telemetry.begin(name)
        result, outcome = self._finish(identity, *hit)
        self._telemetry.record(span, server_id, name, outcome)
        return result, outcome

    async def _send(
        self,
        conn: Connection,
        identity: CallIdentity,
        key: str,
        mode: CacheMode,
        user_meta: dict[str, Any] | None,
        looked: Looked,
        timeout_s: float | None,
    ) -> tuple[CallToolResult, CallOutcome]:
        """The call sent and answered (`_exchange`). One that fails instead, once its request may have left
        (a timeout, a lost connection, a cancellation), ends freshness as an answered write would."""
        stored = looked.found is not None
        # Known before the request leaves: a cancellation leaves time for nothing but the store's mark.
        read_only = await conn.read_only(identity.tool) if self.settings.trusted and not stored else None
        try:
            return await self._exchange(conn, identity, key, mode, user_meta, looked, timeout_s)
        except BaseException as exc:
            await self._keeping.after_unanswered(conn, identity.tool, exc, read_only=read_only, stored=stored)
            raise

    async def _exchange(
        self,
        conn: Connection,
        identity: CallIdentity,
        key: str,
        mode: CacheMode,
        user_meta: dict[str, Any] | None,
        looked: Looked,
        timeout_s: float | None,
    ) -> tuple[CallToolResult, CallOutcome]:
        # The call's own copy of its arguments, made when it was named; the clients build a request of it.
        name, args = identity.tool, cast("dict[str, Any]", identity.sent_arguments)
        found = looked.found
        lookup = looked.decision
        reason = lookup.reason
        status: Status = "bypass" if mode == "bypass" else "miss"
        store = lookup.store if isinstance(lookup, Fetch) else True
        sent_etag = lookup.etag if isinstance(lookup, Revalidate) else None
        repeated = False
        delta_unused: str | None = None
        while True:
            requested_at = self.clock()
            # A repeat asks for the whole answer: no tag, so no delta either.
            accepted = delta_formats(self.settings.deltas) if sent_etag is not None else ()
            if sent_etag is not None:
                # Nothing else in the request changes: the caller's `_meta` goes as it would have.
                request_meta: dict[str, Any] | None = {
                    **(user_meta or {}),
                    **conditional_request_meta(sent_etag, self.settings.meta_key, accept_delta=accepted),
                }
            else:
                request_meta = user_meta
            sent, resent = await sent_with_resend(
                conn, name, timeout_s, partial(conn.send, name, args, request_meta), trusted=self.settings.trusted
            )
            reason = self._note_resent(reason, resent)
            checked = False
            if sent is None:
                sent_etag, checked = None, True
                # The client's own path, with its own timeout.
                reply, resent = await sent_with_resend(
                    conn, name, None, lambda _: conn.send_plain(name, args, user_meta), trusted=self.settings.trusted
                )
                reason = self._note_resent(reason, resent)
            else:
                reply = sent
            decision = decide_reply(
                tool=name,
                sent_etag=sent_etag,
                entry=found.entry if found is not None else None,
                is_error=reply.is_error,
                block=reply_block(reply.meta, self.settings.meta_key),
                size=0,  # filled in by Keeping.keep, which encodes the answer only if it is kept
                requested_at=requested_at,
                received_at=self.clock(),
                store=store,
                keep_private=self.settings.keep_private,
                accepted=accepted,
            )
            match decision:
                case ServeStored():
                    assert found is not None
                    served = await self._serve_stored(conn, name, found, decision, reply, reason)
                    if served is not None:
                        return served
                    # The copy the server confirmed cannot be served: it goes, and the whole answer is asked for.
                    await self._managing.remove(found.key)
                    found, why = None, "the stored answer could not be served"
                case ApplyDelta():
                    assert found is not None
                    patched = await self._patch(conn, identity, key, found, decision, reply, reason)
                    if not isinstance(patched, str):
                        return patched
                    why = delta_unused = patched
                case RepeatWithoutTag():
                    why = decision.reason
                    if decision.delta:
                        delta_unused = why
                    if repeated:
                        logger.warning("tool %r: %s; giving up", name, why)
                        gave_up = CallOutcome(status, False, f"{reason}; {why}", delta_unused=delta_unused)
                        return unanswerable(name, delta=decision.delta), gave_up
                case StoreAnswer() | ReturnUnstored():
                    if not checked and not reply.is_error:
                        await conn.validate(name, reply)
                    kept = await self._keeping.keep(conn, identity, key, found, decision, reply, status, reason)
                    if delta_unused is not None:
                        kept = kept[0], replace(kept[1], delta_unused=delta_unused)
                    return kept
                case _:
                    assert_never(decision)
            logger.info("tool %r: %s; asking again without a tag", name, why)
            reason = f"{reason}; {why}; asked again without a tag"
            repeated, sent_etag = True, None

    def _note_resent(self, reason: str, resent: str | None) -> str:
        if resent is None:
            return reason
        self.stats.resent += 1
        return f"{reason}; {resent}"

    async def _patch(
        self,
        conn: Connection,
        identity: CallIdentity,
        key: str,
        found: Found,
        decision: ApplyDelta,
        reply: CallToolResult,
        lookup_reason: str,
    ) -> tuple[CallToolResult, CallOutcome] | str:
        """The new answer a delta reply makes of the stored one, served and kept as the same answer sent whole
        would be (outcome `patched`); or why not, and the call is asked again in full.

        The ops go onto a private copy of the stored answer whose tag was sent: the decoded tier's when it
        holds that very version, else the store's, which must still hold it (another writer may have replaced
        it, or the store evicted it, while the request was out: then the base is not held)."""
        base = await self._reader.answer_of(found)
        if isinstance(base, Unserved):
            if base is Unserved.UNREADABLE:
                await self._managing.remove(found.key)
            return f"the delta's base is not held: {base.value}"
        held = self._leaves.get(found.key, found.item.tag, found.item.checksum)
        made = patch_answer(
            base, decision.delta, reply.meta, self.settings.meta_key, base_leaves=held, base_size=found.entry.size
        )
        match made:
            case Unpatched():
                return made.reason
            case Patched():
                result = made.result
            case _:
                assert_never(made)
        try:
            await conn.validate(identity.tool, result)
        except RuntimeError:
            # The digest says the server's whole answer is this one, so it would fail the same check; asked
            # again in full, the caller meets that check exactly as it would without the cache.
            return "the patched answer fails the client's checks"
        reason = f"{lookup_reason}; {decision.reason}; {made.reason}"
        reply_bytes = result_bytes(reply)
        return await self._keeping.keep(
            conn,
            identity,
            key,
            found,
            decision.then,
            result,
            "patched",
            reason,
            patched_by=reply_bytes,
            leaves=made.leaves,
            size=made.size,
        )

    async def _serve_stored(
        self,
        conn: Connection,
        name: str,
        found: Found,
        decision: ServeStored,
        reply: CallToolResult,
        lookup_reason: str,
    ) -> tuple[CallToolResult, CallOutcome] | None:
        """The copy whose tag was sent, with the fresh block, checked as the client checks any answer; None if
        it cannot be read or fails the check (a corrupt or foreign entry: never served, never a failed call).

        The store keeps the fresher block only if it still holds that copy: another writer may have replaced
        it meanwhile, and the confirmation is about the copy whose tag was sent, not about whatever is there.
        """
        stored = await self._reader.answer_of(found)
        if isinstance(stored, Unserved):
            return None
        result = merged(stored, decision.block, self.settings.meta_key)
        checked = (found.key, decision.meta.etag or "", found.item.checksum)
        if checked not in self._shelf.validated:
            try:
                await conn.validate(name, result)
            except RuntimeError:
                # What the SDK raises for an answer that does not fit the tool's output schema. Anything else
                # (the connection failing while the schema is fetched) is the call's failure, not the entry's.
                logger.warning("tool %r: the stored answer fails the client's checks; fetching it again", name)
                return None
            self._shelf.validated[checked] = None
        meta = decision.meta
        meta_json, expires_at, tag = meta.to_json(), self._keeping.expires_at(meta), found.item.tag

        def record() -> Coroutine[Any, Any, bool]:
            return self._store.update_meta(found.key, meta_json, expires_at, if_tag=tag, stamp=meta.requested_at)

        # After the answer is returned: the record only feeds other processes and this process's next lookup
        # of the key (which waits for it), and the store keeps it compare-and-set whenever it lands.
        await self._deferred.start(found.key, record, "recording a revalidation")
        saved = bytes_saved(found.entry.size, result_bytes(reply))
        return result, CallOutcome("revalidated", False, f"{lookup_reason}; {decision.reason}", saved)


_LOOKS_AFTER_A_REPLACEMENT = 3
"""Lookups a call makes while other writers keep replacing the entry under it, before it is a miss."""
