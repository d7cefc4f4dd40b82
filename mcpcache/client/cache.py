"""The client half's driver: `ToolCache.execute` answers one call from the cache or the server.

It asks `mcpcache.client.policy` what to do, does the I/O it was told to do through a `Connection` (the only
thing a wrapper provides) and the fenced store, and reports an outcome. The jobs around it live in their
own modules: outcomes and stats (`outcomes`), stored answers (`entries`), single flight (`flights`) and
the failing-store fence (`fence`).

Where two writers meet, the store decides atomically: a save never replaces an entry whose request was
sent later (`Item.stamp`), and a revalidation freshens the stored entry only if it still holds the tag
that was sent (`update_meta(if_tag=...)`). The caller is always served the copy whose tag it sent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import replace
from enum import Enum
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, assert_never, cast, overload

import anyio
from cachetools import LRUCache
from mcp_types import CallToolResult, TextContent

from mcpcache.canonical import CanonicalizationError
from mcpcache.client.background import Deferred
from mcpcache.client.contracts import Connection
from mcpcache.client.entries import (
    Found,
    decode_result,
    merged,
)
from mcpcache.client.flights import Flights
from mcpcache.client.keeping import Keeping
from mcpcache.client.keyrules import KeyRules, overrides
from mcpcache.client.keys import Arm, CallIdentity, plain_arguments, readable_server
from mcpcache.client.leaves import LeafMemo
from mcpcache.client.managing import remember
from mcpcache.client.outcomes import CacheStats, CallOutcome, Status
from mcpcache.client.patching import Patched, Unpatched, patch_answer
from mcpcache.client.policy import (
    CACHE_MODES,
    DEFAULT_MAX_ANSWER_BYTES,
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
    decide_lookup,
    decide_reply,
    delta_formats,
    freshness_ended_at,
    may_serve,
    may_share,
    reply_block,
)
from mcpcache.client.resend import sent_with_resend
from mcpcache.client.stale import DEFAULT_BACKGROUND_REVALIDATIONS, Background, StaleServing
from mcpcache.client.telemetry import ClientTelemetry
from mcpcache.client.tier import DecodedTier, hold
from mcpcache.client.views import view_of
from mcpcache.protocol import META_KEY, conditional_request_meta
from mcpcache.sizes import bytes_saved, result_bytes
from mcpcache.stores.base import Store
from mcpcache.stores.fence import (
    DEFAULT_STORE_COOLDOWN_S,
    DEFAULT_STORE_DEADLINE_S,
    DEFAULT_STORE_SECONDS_PER_MB,
    FencedStore,
    FenceSettings,
)
from mcpcache.stores.opening import TOOLS_FILE, default_store

if TYPE_CHECKING:
    from fastmcp import Client as FastMCPClient
    from mcp import Client as MCPClient
    from mcp import ClientSession

    from mcpcache.client.fastmcp import CachedFastMCPClient
    from mcpcache.client.wrappers import CachedMCPClient, CachedSession

__all__ = ["CacheStats", "CallOutcome", "ToolCache"]

logger = logging.getLogger("mcpcache.client")

Clock = Callable[[], float]
K = TypeVar("K")
V = TypeVar("V")

DEFAULT_KEEP_STALE_S = 7 * 24 * 3600.0
"""How long a stale but tagged entry is kept for cheap revalidation before the store may drop it."""


def _unanswerable(name: str, *, delta: bool = False) -> CallToolResult:
    if delta:
        text = (
            f"The server answered a call of {name!r} that asked for the whole answer (no tag) with a delta reply "
            "it could not be patched from, so no answer is available; mcpcache never passes a delta reply off as "
            "a result."
        )
    else:
        text = (
            f"The server answered 'not modified' to a call of {name!r} that carried no tag (a repeat asking for "
            "the whole answer), so no answer is available; mcpcache never passes a not-modified reply off as a "
            "result."
        )
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


class _Unserved(Enum):
    """Why a stored answer chosen from its metadata was not served after all."""

    UNREADABLE = "the stored answer could not be read"
    """Its body does not decode: it goes."""
    GONE = "the stored answer changed or went while its body was loaded"
    """Another writer replaced or removed it (or the store dropped it as corrupt): look again."""
    STORE_FAILED = "the store did not hand over the stored answer"
    """The load failed or missed its deadline: a miss, and the entry stays."""


class _Looked:
    """What one lookup found, when freshness last ended, and what the policy says to do."""

    __slots__ = ("decision", "ended_at", "found")

    def __init__(self, found: Found | None, ended_at: float | None, decision: ServeFresh | Revalidate | Fetch):
        self.found = found
        self.ended_at = ended_at
        self.decision = decision


class ToolCache(StaleServing, Keeping):
    """A private cache for MCP tool results.

    store: where answers are kept (default: a SQLite file in the user's cache directory).
    partition: the authorization context the answers belong to (derive it from a verified credential).
    share_public: serve answers the server marked public to other partitions of the same store.
    keep_private: keep answers the server marked private (the default). False for a partition that answers
        several principals it cannot tell apart (the gateway's unauthenticated callers): their private answers
        are returned as they came and never kept (the outcome says so), public ones are kept as usual.
    trusted: believe the server's readOnlyHint and idempotentHint annotations: calls to tools not marked
        read-only end the freshness of that server's entries in this partition (otherwise every call without
        a cache block does), and a call of a tool marked read-only or idempotent whose exchange was lost after
        it was sent is sent once more (docs/client.md, "Idempotent tools").
    keep_stale_s: how long a tagged entry is kept after it goes stale, for cheap revalidation.
    store_deadline_s: the longest a call waits on any one store operation that moves no body; a store that
        does not answer in time is a miss, and is not asked again for `store_cooldown_s`.
    store_deadline_per_mb_s: what a store operation that moves a body may take on top of that, per MB
        (10^6 bytes) of the stored body: a save, or the load of an answer to serve (counted up to
        `max_answer_bytes`).
    max_answer_bytes: the largest answer kept, in stored bytes; a larger one is passed to the caller and
        neither stored nor held decoded (its outcome says so).
    decoded_tier_bytes: how many bytes of stored answers (counted as stored) this process keeps decoded in
        front of the store (see `mcpcache.client.tier`); 0 keeps none; None (the default) is
        `max_answer_bytes`, so any answer the cache stores can be held. Every serve is a private copy,
        unless `read_only_views`.
    deltas: accept delta replies (docs/client.md, "Delta replies"): a conditional request lists the delta
        formats this cache applies, and a server that still holds the answer sent under the tag may reply
        with the change only; the cache patches a private copy of its stored answer, verifies the digest of
        the whole new answer, and serves and stores it (outcome `patched`). Any doubt is a repeat of the
        call in full. False: requests accept no delta, as before deltas existed.
    serve_stale: serve an answer that is no longer fresh when the server allows it (docs/client.md, "Serving
        stale"): at once while it is revalidated in the background, or when the server cannot answer. False:
        never, whatever the server allows.
    background_revalidations: how many of those background revalidations run at once; past it a call
        revalidates in the foreground. `close()` cancels and awaits the ones running.
    read_only_views: serve the answer the decoded tier holds itself, not a private copy of it (and hold a
        full answer as it was returned, not a copy). Off by default. It saves the copy and freeing it (about
        1 ms of CPU for a 10 MB notebook answer, 15 us for 1 KB), and costs the caller a promise: nothing reachable from
        a result (its content blocks, structured content, `_meta`, FastMCP's `.data`) is ever changed, by
        the caller or anything it hands the result to. The SDK's models are mutable, so nothing enforces
        it: a change is served to every later caller of this cache in this process until the entry is
        replaced or evicted (the store's copy is not affected).
    key_arguments, ignore_arguments: per tool, the arguments that alone name its answer, or those that never
        change it (a request id): calls differing only in the others share one entry and one request
        (docs/client.md, "Key arguments"). They win over what a server declares in `tools/list`, which is
        believed only when `trusted`. Naming an argument that does change the answer serves wrong answers.
    tracer_provider, meter_provider: the OpenTelemetry providers for this cache's spans and metrics
        (docs/observability.md); None (the default): the global ones, once the application sets them.
    """

    def __init__(
        self,
        store: Store | None = None,
        *,
        partition: str = "",
        share_public: bool = False,
        keep_private: bool = True,
        trusted: bool = False,
        meta_key: str = META_KEY,
        keep_stale_s: float = DEFAULT_KEEP_STALE_S,
        store_deadline_s: float = DEFAULT_STORE_DEADLINE_S,
        store_cooldown_s: float = DEFAULT_STORE_COOLDOWN_S,
        store_deadline_per_mb_s: float = DEFAULT_STORE_SECONDS_PER_MB,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        decoded_tier_bytes: int | None = None,
        deltas: bool = True,
        serve_stale: bool = True,
        background_revalidations: int = DEFAULT_BACKGROUND_REVALIDATIONS,
        read_only_views: bool = False,
        key_arguments: Mapping[str, Iterable[str]] | None = None,
        ignore_arguments: Mapping[str, Iterable[str]] | None = None,
        tracer_provider: Any | None = None,
        meter_provider: Any | None = None,
        clock: Clock = time.time,
    ) -> None:
        if not isinstance(partition, str):
            raise TypeError("partition must be a string")
        if keep_stale_s < 0:
            raise ValueError("keep_stale_s must be >= 0")
        if isinstance(max_answer_bytes, bool) or not isinstance(max_answer_bytes, int) or max_answer_bytes < 1:
            raise ValueError(f"max_answer_bytes must be an int >= 1, got {max_answer_bytes!r}")
        self.max_answer_bytes = max_answer_bytes
        if type(background_revalidations) is not int or background_revalidations < 0:
            raise ValueError(f"background_revalidations must be an int >= 0, got {background_revalidations!r}")
        self.serve_stale = serve_stale
        self._background = Background(background_revalidations)
        self.store = store if store is not None else default_store(TOOLS_FILE)
        self._owns_store = store is None
        """`close()` closes only a store this cache opened itself (the default one)."""
        self.partition = partition
        self.share_public = share_public
        self.keep_private = keep_private
        self.trusted = trusted
        self.meta_key = meta_key
        self._key_rules = KeyRules(overrides(key_arguments, ignore_arguments), trusted=trusted)
        self.keep_stale_s = keep_stale_s
        if not isinstance(deltas, bool):
            raise TypeError("deltas must be True or False")
        self.deltas = deltas
        self.clock = clock
        self.stats = CacheStats()
        self._telemetry = ClientTelemetry(tracer_provider, meter_provider)
        self._tier = DecodedTier(max_answer_bytes if decoded_tier_bytes is None else decoded_tier_bytes)
        self._leaves = LeafMemo()
        self.read_only_views = read_only_views
        self._deferred = Deferred.of(self.store)
        """Store writes started beside the calls that asked for them (see `mcpcache.client.background`)."""
        self._flights = Flights()
        self._validated: LRUCache[tuple[str, str, str], None] = LRUCache(maxsize=4096)
        """Stored answers this process has already checked against the client's output schemas, by (key,
        tag, body checksum): a revalidated answer is checked the first time it is served here, not every
        time, and another body stored under the same key and tag is checked again."""
        self._ended: LRUCache[str, float] = LRUCache(maxsize=4096)
        """When this process last ended freshness, by mark key (see `end_freshness`)."""
        self._invalidated: dict[str, float] = {}
        """When this process last invalidated a call, by its mark key (see `invalidate`); the oldest go first
        past `_MAX_REMEMBERED`. A plain dict: every lookup reads it, and most read it empty."""
        self._cleared_at: float | None = None
        """When this process last cleared the cache: every entry and flight older than that is not fresh here."""
        self._variants: dict[tuple[str, str, str], None] = {}
        """(server, era, variant) of the calls this process made, the oldest going first past
        `_MAX_REMEMBERED`: where an invalidation finds a call's keys."""
        self._named: dict[tuple[Any, ...], tuple[CallIdentity, str]] = {}
        """The identity and private key of calls of plain arguments keyed on every argument, by (server, era,
        tool, variant, `plain_arguments`), the oldest going first past `_MAX_REMEMBERED`: a fresh hit of a
        call made before names it without building and hashing it again (`fresh_hit`)."""
        self._store = FencedStore(
            self.store,
            who="tool cache store",
            meanwhile="calls go on without the cache",
            logger=logger,
            on_failure=self._count_store_failure,
            settings=FenceSettings(store_deadline_s, store_cooldown_s, store_deadline_per_mb_s),
            most_bytes=max_answer_bytes,
        )

    def _count_store_failure(self) -> None:
        self.stats.store_failures += 1
        self._telemetry.store_failure(type(self.store).__name__)

    def forget_validations(self) -> None:
        """Check stored answers again before serving them, and read the tools' key arguments again (the
        wrappers call it when tools change)."""
        self._validated.clear()
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
    ) -> tuple[CallToolResult, CallOutcome]:
        """Answer one call, from the cache or the server. Returns the result and what was done."""
        span = self._telemetry.begin(name)
        try:
            if not self._telemetry.own(span):
                result, outcome = await self._answer(conn, name, arguments, mode, meta, variant)
            else:
                with self._telemetry.inside(span):
                    result, outcome = await self._answer(conn, name, arguments, mode, meta, variant)
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
    ) -> tuple[CallToolResult, CallOutcome]:
        try:
            return await self._execute(conn, name, arguments, mode=mode, meta=meta, variant=variant)
        except Exception as exc:
            served = await self._serve_if_error(conn, name, arguments, mode, variant, exc)
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
    ) -> tuple[CallToolResult, CallOutcome]:
        if mode not in CACHE_MODES:
            raise ValueError(f"cache mode must be one of {CACHE_MODES}, got {mode!r}")
        args = dict(arguments or {})
        user_meta = dict(meta) if meta else None
        rules = self._key_rules
        # Only a trusted server's declarations are awaited (listed once per server); the rest is a dict read.
        rule = await rules.rule(conn, name) if rules.trusted and mode != "bypass" else rules.own.get(name)
        identity = KeyRules.identity(rule, conn.server_id, self.partition, conn.era, name, args, variant)
        try:
            key = identity.key("private")
        except CanonicalizationError as exc:
            mode, why = "bypass", f"not cached: arguments have no canonical form ({exc})"
        else:
            why = "bypass: the cache is not consulted and nothing is stored"
        if mode == "bypass":
            # Nothing is looked up or kept, but a not-modified reply is still never passed off as an answer.
            left_alone = _Looked(None, None, Fetch(store=False, reason=why))
            sent = await self._send(conn, identity, "", mode, user_meta, left_alone, conn.timeout_s)
            return self._finish(identity, *sent)
        if (conn.server_id, conn.era, variant) not in self._variants:
            remember(self._variants, (conn.server_id, conn.era, variant), None)

        if mode == "use":
            hit = self._fresh_now(identity, key)
            if hit is not None:
                return self._finish(identity, *hit)
        deadline = None if conn.timeout_s is None else anyio.current_time() + conn.timeout_s
        replaced = 0
        while True:
            landed = self._flights.landed(key)
            looked = await self._look(identity, key, mode)
            if isinstance(looked.decision, ServeFresh):
                served = await self._serve_fresh(looked)
                if not isinstance(served, _Unserved):
                    return self._finish(identity, *served)
                replaced += served is _Unserved.GONE
                if served is _Unserved.GONE and replaced < _LOOKS_AFTER_A_REPLACEMENT:
                    continue  # another writer's version: judged by its own metadata
                looked = await self._unserved(looked, served)
            stale = await self._serve_stale(conn, identity, key, mode, user_meta, looked)
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
                            reply_block(shared[0].meta, self.meta_key), self.keep_private
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
        looked: _Looked,
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
    ) -> tuple[CallToolResult, CallOutcome] | None:
        """The call answered as a fresh hit without awaiting anything (`_fresh_now`: a store in memory, the
        answer held decoded), with its outcome recorded as `execute` records it; None when it cannot be, and
        `execute` answers it. What the caching views try first, before they build a connection."""
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
        if (server_id, era, variant) not in self._variants:
            remember(self._variants, (server_id, era, variant), None)
        hit = self._fresh_now(identity, key)
        if hit is None:
            return None
        span = self._telemetry.begin(name)
        result, outcome = self._finish(identity, *hit)
        self._telemetry.record(span, server_id, name, outcome)
        return result, outcome

    def _fresh_now(self, identity: CallIdentity, key: str) -> tuple[CallToolResult, CallOutcome] | None:
        """A fresh hit answered without awaiting anything, or None for the ordinary path (which decides every
        case, this one included, the slower way).

        Only the common case: the store answers from this process's memory (`Store.peek_now`), holds the
        call's own-arm entry, the decoded tier holds exactly that version, and the entry is fresh by the same
        rules as ever (the store's marks and this process's). Anything else, including a failing store
        (whose failure the ordinary path meets and counts) or a confirmation of this key not yet written,
        goes the ordinary way.
        """
        if self._store.circuit_open or self._deferred.pending(key):
            return None
        mark_key, call_mark = identity.mark_key(), identity.call_mark_key()
        try:
            items = self.store.peek_now([key, mark_key, call_mark])
        except Exception:
            return None
        if items is None or len(items) != 3:
            return None
        item, server_mark, call_mark_item = items
        if item is None:
            return None
        held = self._tier.get(key, item.tag, item.checksum)
        if held is None:
            return None
        entry = self._tier.entry_of(key, item.meta)
        if entry is None or entry.tool != identity.tool:
            return None
        ended = freshness_ended_at(
            self._ended_here(mark_key, call_mark),
            server_mark.meta.get("endedAt") if server_mark is not None else None,
            call_mark_item.meta.get("endedAt") if call_mark_item is not None else None,
            self._lost_at([key, mark_key, call_mark]),
        )
        now = self.clock()
        decision = decide_lookup("use", entry, now, ended)
        if not isinstance(decision, ServeFresh):
            return None
        result = held.result if self.read_only_views else held.copy()
        left_ms = max(0, int((entry.fresh_until() - now) * 1000))
        return result, CallOutcome("fresh_hit", False, decision.reason, entry.size, fresh_for_ms=left_ms)

    async def _look(self, identity: CallIdentity, private_key: str, mode: CacheMode) -> _Looked:
        """The entry this partition may be served (its own arm first, then the shared one), when freshness
        last ended, and what to do about it, all from one round trip to the store for the metadata only.
        The body is loaded when an answer is to be served (`_answer_of`), within a deadline scaled to the
        size this read names, unless the decoded tier holds that very version."""
        arms: list[tuple[Arm, str]] = [("private", private_key)]
        if self.share_public:
            arms.append(("public", identity.key("public", share_public=True)))
        mark_key, call_mark = identity.mark_key(), identity.call_mark_key()
        keys = [key for _, key in arms] + [mark_key, call_mark]
        if self._deferred:
            for _, key in arms:
                await self._deferred.settled(key)  # this process reads its own confirmations
        items = await self._store.look(keys, peek=True)
        if items is None:
            # The store did not answer, so a freshness end another cache or process recorded there is
            # unknown: it may have come at any moment up to now. Only a request sent from now on may be
            # shared (see `decide_join`), and nothing stored is served.
            now = self.clock()
            decision = decide_lookup(mode, None, now, now)
            if isinstance(decision, Fetch) and self._store.trouble:
                decision = replace(decision, reason=f"miss: the store {self._store.trouble}")
            return _Looked(None, now, decision)
        found: Found | None = None
        for (arm, key), item in zip(arms, items, strict=False):
            if item is None:
                self._tier.discard(key)
                continue
            entry = self._tier.entry_of(key, item.meta)
            if entry is None or entry.tool != identity.tool:
                await self._remove(key)  # not a record this cache wrote for this call
                continue
            if may_serve(entry, arm, self.share_public):
                decoded = self._tier.get(key, item.tag, item.checksum)
                found = Found(key, arm, entry, item, decoded, identity.server, call_mark)
                break
        server_mark, call_mark_item = items[-2], items[-1]
        ended = freshness_ended_at(
            self._ended_here(mark_key, call_mark),
            server_mark.meta.get("endedAt") if server_mark is not None else None,
            call_mark_item.meta.get("endedAt") if call_mark_item is not None else None,
            self._lost_at(keys),
        )
        entry = found.entry if found is not None else None
        return _Looked(found, ended, decide_lookup(mode, entry, self.clock(), ended))

    def _lost_at(self, keys: list[str]) -> float | None:
        """When the store may have lost writes to these keys (a Redis failover or restart), on this cache's
        clock: a freshness mark may have been among them, so it counts as a freshness end (an entry whose
        freshness was granted before it is revalidated, never served fresh)."""
        lost = self.store.lost_before(keys)
        return None if lost is None else self.clock() - max(0.0, self.store.now() - lost)

    async def _answer_of(self, found: Found) -> CallToolResult | _Unserved:
        """A private copy of the stored answer `found` names (with `read_only_views`, the held answer itself):
        from the decoded tier when it holds this version; otherwise its body is loaded (within a deadline
        scaled to the size the lookup read) and decoded, and the decoding kept in the tier."""
        if found.decoded is not None:
            return found.decoded.result if self.read_only_views else found.decoded.copy()
        loaded = await self._store.look([found.key], moving=found.entry.stored_bytes)
        if loaded is None:
            return _Unserved.STORE_FAILED
        item = loaded[0]
        if item is None or item.tag != found.item.tag or item.checksum != found.item.checksum:
            return _Unserved.GONE
        body = item.body
        stored = decode_result(body)
        if stored is None:
            return _Unserved.UNREADABLE
        if not self._tier.admits(len(body)) or not item.checksum:
            return stored
        held = hold(
            stored, body, item.tag, item.checksum, server=found.server_id, call=found.call, answer=found.entry.size
        )
        self._tier.put(found.key, held)
        return stored if self.read_only_views else held.copy()

    async def _serve_fresh(self, looked: _Looked) -> tuple[CallToolResult, CallOutcome] | _Unserved:
        assert looked.found is not None
        stored = await self._answer_of(looked.found)
        if isinstance(stored, _Unserved):
            return stored
        left_ms = max(0, int((looked.found.entry.fresh_until() - self.clock()) * 1000))
        saved = looked.found.entry.size
        outcome = CallOutcome("fresh_hit", False, looked.decision.reason, saved, fresh_for_ms=left_ms)
        return stored, outcome

    async def _unserved(self, looked: _Looked, why: _Unserved) -> _Looked:
        """A stored answer that could not be served: one that cannot be decoded goes; the call is a miss."""
        assert looked.found is not None
        if why is _Unserved.UNREADABLE:
            await self._remove(looked.found.key)
        return _Looked(None, looked.ended_at, Fetch(store=True, reason=f"miss: {why.value}"))

    async def _send(
        self,
        conn: Connection,
        identity: CallIdentity,
        key: str,
        mode: CacheMode,
        user_meta: dict[str, Any] | None,
        looked: _Looked,
        timeout_s: float | None,
    ) -> tuple[CallToolResult, CallOutcome]:
        """The call sent and answered (`_exchange`). One that fails instead, once its request may have left
        (a timeout, a lost connection, a cancellation), ends freshness as an answered write would."""
        stored = looked.found is not None
        # Known before the request leaves: a cancellation leaves time for nothing but the store's mark.
        read_only = await conn.read_only(identity.tool) if self.trusted and not stored else None
        try:
            return await self._exchange(conn, identity, key, mode, user_meta, looked, timeout_s)
        except BaseException as exc:
            await self._after_unanswered(conn, identity.tool, exc, read_only=read_only, stored=stored)
            raise

    async def _exchange(
        self,
        conn: Connection,
        identity: CallIdentity,
        key: str,
        mode: CacheMode,
        user_meta: dict[str, Any] | None,
        looked: _Looked,
        timeout_s: float | None,
    ) -> tuple[CallToolResult, CallOutcome]:
        name, args = identity.tool, dict(identity.sent_arguments)
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
            accepted = delta_formats(self.deltas) if sent_etag is not None else ()
            if sent_etag is not None:
                # Nothing else in the request changes: the caller's `_meta` goes as it would have.
                request_meta: dict[str, Any] | None = {
                    **(user_meta or {}),
                    **conditional_request_meta(sent_etag, self.meta_key, accept_delta=accepted),
                }
            else:
                request_meta = user_meta
            sent, resent = await sent_with_resend(
                conn, name, timeout_s, partial(conn.send, name, args, request_meta), trusted=self.trusted
            )
            reason = self._note_resent(reason, resent)
            checked = False
            if sent is None:
                sent_etag, checked = None, True
                # The client's own path, with its own timeout.
                reply, resent = await sent_with_resend(
                    conn, name, None, lambda _: conn.send_plain(name, args, user_meta), trusted=self.trusted
                )
                reason = self._note_resent(reason, resent)
            else:
                reply = sent
            decision = decide_reply(
                tool=name,
                sent_etag=sent_etag,
                entry=found.entry if found is not None else None,
                is_error=reply.is_error,
                block=reply_block(reply.meta, self.meta_key),
                size=0,  # filled in by _keep, which encodes the answer only if it is kept
                requested_at=requested_at,
                received_at=self.clock(),
                store=store,
                keep_private=self.keep_private,
                accepted=accepted,
            )
            match decision:
                case ServeStored():
                    assert found is not None
                    served = await self._serve_stored(conn, name, found, decision, reply, reason)
                    if served is not None:
                        return served
                    # The copy the server confirmed cannot be served: it goes, and the whole answer is asked for.
                    await self._remove(found.key)
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
                        return _unanswerable(name, delta=decision.delta), gave_up
                case StoreAnswer() | ReturnUnstored():
                    if not checked and not reply.is_error:
                        await conn.validate(name, reply)
                    kept = await self._keep(conn, identity, key, found, decision, reply, status, reason)
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
        base = await self._answer_of(found)
        if isinstance(base, _Unserved):
            if base is _Unserved.UNREADABLE:
                await self._remove(found.key)
            return f"the delta's base is not held: {base.value}"
        held = self._leaves.get(found.key, found.item.tag, found.item.checksum)
        made = patch_answer(base, decision.delta, reply.meta, self.meta_key, base_leaves=held)
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
        return await self._keep(
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
        stored = await self._answer_of(found)
        if isinstance(stored, _Unserved):
            return None
        result = merged(stored, decision.block, self.meta_key)
        checked = (found.key, decision.meta.etag or "", found.item.checksum)
        if checked not in self._validated:
            try:
                await conn.validate(name, result)
            except RuntimeError:
                # What the SDK raises for an answer that does not fit the tool's output schema. Anything else
                # (the connection failing while the schema is fetched) is the call's failure, not the entry's.
                logger.warning("tool %r: the stored answer fails the client's checks; fetching it again", name)
                return None
            self._validated[checked] = None
        meta = decision.meta
        meta_json, expires_at, tag = meta.to_json(), self._expires_at(meta), found.item.tag

        def record() -> Coroutine[Any, Any, bool]:
            return self._store.update_meta(found.key, meta_json, expires_at, if_tag=tag, stamp=meta.requested_at)

        # After the answer is returned: the record only feeds other processes and this process's next lookup
        # of the key (which waits for it), and the store keeps it compare-and-set whenever it lands.
        await self._deferred.start(found.key, record, "recording a revalidation")
        saved = bytes_saved(found.entry.size, result_bytes(reply))
        return result, CallOutcome("revalidated", False, f"{lookup_reason}; {decision.reason}", saved)


_LOOKS_AFTER_A_REPLACEMENT = 3
"""Lookups a call makes while other writers keep replacing the entry under it, before it is a miss."""
