"""The client half: a private cache for tool results, shared by the SDK and FastMCP wrappers.

`ToolCache.execute` is the driver. It asks `mcpcache.policy` what to do, does the I/O it was told to do
through a `Connection` (the only thing a wrapper provides), and reports an outcome. Every store
operation is fenced: a store that raises turns into a miss, never into a failed call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import anyio
import pydantic_core
from cachetools import LRUCache
from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError

from mcpcache.etag import CanonicalizationError
from mcpcache.keys import Arm, CallIdentity
from mcpcache.paths import default_store
from mcpcache.policy import (
    CACHE_MODES,
    CacheMode,
    EntryMeta,
    Fetch,
    RepeatWithoutTag,
    ReturnUnstored,
    Revalidate,
    ServeFresh,
    ServeStored,
    StoreAnswer,
    decide_lookup,
    decide_reply,
    ends_freshness,
    may_serve,
)
from mcpcache.protocol import META_KEY, NOT_MODIFIED_KEY, CacheBlock, parse_cache_block
from mcpcache.stores.base import Item, Store

logger = logging.getLogger("mcpcache.client")

Clock = Callable[[], float]

DEFAULT_KEEP_STALE_S = 7 * 24 * 3600.0
"""How long a stale but tagged entry is kept for cheap revalidation before the store may drop it."""

Status = Literal["fresh_hit", "revalidated", "miss", "bypass"]


@dataclass(frozen=True)
class CallOutcome:
    """What the cache did for one call, in terms a caller can log or assert on."""

    status: Status
    """fresh_hit: served with no request; revalidated: the server said not-modified; miss: a full answer
    came over the wire; bypass: the cache was not consulted."""
    stored: bool
    reason: str
    bytes_saved: int = 0
    coalesced: bool = False
    """True when this call waited for an identical call in flight instead of sending its own."""


@dataclass
class CacheStats:
    calls: int = 0
    fresh_hits: int = 0
    revalidations: int = 0
    misses: int = 0
    bypasses: int = 0
    stored: int = 0
    not_stored: int = 0
    coalesced: int = 0
    store_failures: int = 0
    bytes_saved: int = 0
    """Answer bytes that did not cross the wire: whole answers on fresh hits, answer minus the
    not-modified reply on revalidations."""

    def record(self, outcome: CallOutcome) -> None:
        self.calls += 1
        self.bytes_saved += outcome.bytes_saved
        if outcome.coalesced:
            self.coalesced += 1
            return
        if outcome.status == "fresh_hit":
            self.fresh_hits += 1
        elif outcome.status == "revalidated":
            self.revalidations += 1
        elif outcome.status == "miss":
            self.misses += 1
        else:
            self.bypasses += 1
        if outcome.status in ("miss", "bypass"):
            if outcome.stored:
                self.stored += 1
            else:
                self.not_stored += 1

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


class Connection(Protocol):
    """What the driver needs from one connected client; the wrappers implement it."""

    server_id: str
    era: str

    async def send_plain(self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None) -> CallToolResult:
        """An ordinary call through the client's own path (its output-schema validation included)."""

    async def send_conditional(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any]
    ) -> CallToolResult | None:
        """The call with a tag, without the client's validation (a not-modified reply would fail it).
        None when the conditional form cannot be used (the driver then sends an ordinary call)."""

    async def validate(self, name: str, result: CallToolResult) -> None:
        """Raise as the client would for an answer that does not fit the tool's output schema (the SDK's
        check raises RuntimeError; anything else it raises is a failure of the call, not of the answer)."""

    async def read_only(self, name: str) -> bool | None:
        """The tool's readOnlyHint, as the server announced it (None: unknown)."""


def encode_result(result: CallToolResult) -> bytes:
    # The serializer's bytes directly: model_dump_json would decode them to a str only to encode it again.
    return result.__pydantic_serializer__.to_json(result, by_alias=True, exclude_none=True)


def decode_result(body: bytes) -> CallToolResult | None:
    # Parsing to Python values first and validating those measured faster than model_validate_json on
    # answers from 1 KB to 10 MB; pydantic_core keeps integers above 64 bits exact.
    try:
        return CallToolResult.model_validate(pydantic_core.from_json(body))
    except (ValidationError, ValueError):
        return None


def _merged(result: CallToolResult, block: CacheBlock, meta_key: str) -> CallToolResult:
    """The stored answer with the fresh block on its `_meta`; its other `_meta` keys are kept."""
    fresh = block.to_wire()
    fresh.pop(NOT_MODIFIED_KEY, None)  # what the caller gets is a full answer, not a not-modified reply
    meta = dict(result.meta or {})
    meta[meta_key] = fresh
    return result.model_copy(update={"meta": meta})


def _claims_not_modified(meta: object, meta_key: str) -> bool:
    """Whether a reply's raw cache block says `notModified` in any form but absent, null or false."""
    raw = meta.get(meta_key) if isinstance(meta, Mapping) else None
    if not isinstance(raw, Mapping) or NOT_MODIFIED_KEY not in raw:
        return False
    return raw[NOT_MODIFIED_KEY] is not None and raw[NOT_MODIFIED_KEY] is not False


def _unanswerable(name: str) -> CallToolResult:
    text = (
        f"The server answered 'not modified' to a call of {name!r} that carried no tag (a repeat asking for the "
        "whole answer), so no answer is available; mcpcache never passes a not-modified reply off as a result."
    )
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


@dataclass
class _Flight:
    done: anyio.Event = field(default_factory=anyio.Event)
    result: CallToolResult | None = None
    outcome: CallOutcome | None = None
    error: BaseException | None = None
    body: bytes | None = None
    """Encoded once, by the first follower, so a call nobody waited for pays nothing for sharing."""

    def copy_for_follower(self) -> tuple[CallToolResult, CallOutcome] | None:
        """A private copy of the leader's answer, and this follower's outcome (it sent nothing)."""
        if self.result is None or self.outcome is None:
            return None
        if self.body is None:
            self.body = encode_result(self.result)
        copy = decode_result(self.body)
        if copy is None:
            return None
        leader = self.outcome
        saved = len(self.body) if leader.status in ("miss", "bypass") else leader.bytes_saved
        return copy, CallOutcome(
            leader.status, False, f"shared an identical call in flight: {leader.reason}", saved, True
        )


@dataclass(frozen=True)
class _Looked:
    """What a lookup found (key, entry, item) and what the policy says to do about it."""

    found: tuple[str, EntryMeta, Item] | None
    decision: ServeFresh | Revalidate | Fetch


class _FencedStore:
    """The store's operations with every failure turned into a miss (or a skipped write).

    One warning per burst of failures of the same operation, re-armed when that operation succeeds.
    """

    def __init__(self, store: Store, on_failure: Callable[[], None]) -> None:
        self.store = store
        self._on_failure = on_failure
        self._warned: set[str] = set()

    async def _run(self, op: str, action: Awaitable[Any]) -> Any:
        try:
            value = await action
        except Exception:
            self._on_failure()
            if op not in self._warned:
                self._warned.add(op)
                logger.warning("tool cache store %s failed; continuing without the cache", op, exc_info=True)
            return None
        self._warned.discard(op)
        return value

    async def load(self, key: str) -> Item | None:
        item = await self._run("load", self.store.load(key))
        return item if isinstance(item, Item) else None

    async def load_many(self, keys: list[str]) -> list[Item | None]:
        items = await self._run("load", self.store.load_many(keys))
        if not isinstance(items, list) or len(items) != len(keys):
            return [None] * len(keys)
        return [item if isinstance(item, Item) else None for item in items]

    async def save(self, key: str, item: Item) -> None:
        await self._run("save", self.store.save(key, item))

    async def update_meta(self, key: str, meta: Mapping[str, Any], expires_at: float | None) -> None:
        await self._run("update", self.store.update_meta(key, meta, expires_at))

    async def remove(self, key: str) -> None:
        await self._run("remove", self.store.remove(key))


class ToolCache:
    """A private cache for MCP tool results.

    store: where answers are kept (default: a SQLite file in the user's cache directory).
    partition: the authorization context the answers belong to (derive it from a verified credential).
    share_public: serve answers the server marked public to other partitions of the same store.
    trusted: believe the server's readOnlyHint annotations (then calls to tools not marked read-only end
        the freshness of that server's entries in this partition).
    keep_stale_s: how long a tagged entry is kept after it goes stale, for cheap revalidation.
    """

    def __init__(
        self,
        store: Store | None = None,
        *,
        partition: str = "",
        share_public: bool = False,
        trusted: bool = False,
        meta_key: str = META_KEY,
        keep_stale_s: float = DEFAULT_KEEP_STALE_S,
        clock: Clock = time.time,
    ) -> None:
        if not isinstance(partition, str):
            raise TypeError("partition must be a string")
        if keep_stale_s < 0:
            raise ValueError("keep_stale_s must be >= 0")
        self.store = store if store is not None else default_store("tools.db")
        self.partition = partition
        self.share_public = share_public
        self.trusted = trusted
        self.meta_key = meta_key
        self.keep_stale_s = keep_stale_s
        self.clock = clock
        self.stats = CacheStats()
        self._flights: dict[str, _Flight] = {}
        self._validated: LRUCache[tuple[str, str, int], None] = LRUCache(maxsize=4096)
        """Stored answers this process has already checked against the client's output schemas, by (key,
        tag, size): a revalidated answer is checked the first time it is served here, not every time."""
        self._ended: dict[str, float] = {}
        """When this process last ended freshness, by mark key (see `end_freshness`)."""
        self._store = _FencedStore(self.store, self._count_store_failure)

    def _count_store_failure(self) -> None:
        self.stats.store_failures += 1

    def forget_validations(self) -> None:
        """Check stored answers again before serving them (the wrappers call it when tools change)."""
        self._validated.clear()

    def wrap(self, client: Any, *, server_id: str | None = None) -> Any:
        """A caching view of `client` (an `mcp.Client`, an `mcp.ClientSession` or a `fastmcp.Client`)."""
        from mcpcache.client.wrappers import wrap_client

        return wrap_client(self, client, server_id=server_id)

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
        if mode not in CACHE_MODES:
            raise ValueError(f"cache mode must be one of {CACHE_MODES}, got {mode!r}")
        args = dict(arguments or {})
        user_meta = dict(meta) if meta else None
        identity = CallIdentity(conn.server_id, self.partition, conn.era, name, args, variant)
        try:
            private_key = identity.key("private")
        except CanonicalizationError as exc:
            result = await conn.send_plain(name, args, user_meta)
            outcome = CallOutcome("bypass", False, f"not cached: arguments have no canonical form ({exc})")
            return self._finish(result, outcome)
        if mode != "use":
            result, outcome = await self._execute_once(conn, identity, private_key, mode, user_meta, None)
            return self._finish(result, outcome)
        found: _Looked | None = None
        while True:
            flight = self._flights.get(private_key)
            if flight is not None:
                await flight.done.wait()
                shared = flight.copy_for_follower()
                if shared is not None:
                    return self._finish(*shared)
                if flight.error is not None:
                    raise flight.error
                continue  # the leader was cancelled: this call goes on its own
            if found is None:
                # A fresh hit sends nothing, so it needs no flight: look first, register only to go out.
                found = await self._look(identity, private_key)
                fresh = self._serve_fresh(found)
                if fresh is not None:
                    return self._finish(*fresh)
                continue  # the lookup awaited: an identical call may have taken off meanwhile
            break
        flight = _Flight()
        self._flights[private_key] = flight
        try:
            result, outcome = await self._execute_once(conn, identity, private_key, mode, user_meta, found)
            flight.result, flight.outcome = result, outcome
            return self._finish(result, outcome)
        except Exception as exc:
            flight.error = exc
            raise
        finally:
            del self._flights[private_key]
            flight.done.set()

    def _finish(self, result: CallToolResult, outcome: CallOutcome) -> tuple[CallToolResult, CallOutcome]:
        self.stats.record(outcome)
        logger.debug("tool cache: %s (%s)", outcome.status, outcome.reason)
        return result, outcome

    async def _look(self, identity: CallIdentity, private_key: str) -> _Looked:
        """The entry this partition may be served (its own arm first, then the shared one), when freshness
        last ended, and what to do about it, all from one round trip to the store."""
        arms: list[tuple[Arm, str]] = [("private", private_key)]
        if self.share_public:
            arms.append(("public", identity.key("public", share_public=True)))
        mark_key = identity.mark_key()
        items = await self._store.load_many([key for _, key in arms] + [mark_key])
        found: tuple[str, EntryMeta, Item] | None = None
        for (arm, key), item in zip(arms, items, strict=False):
            if item is None:
                continue
            entry = EntryMeta.from_json(item.meta)
            if entry is None or entry.tool != identity.tool:
                await self._store.remove(key)
                continue
            if may_serve(entry, arm, self.share_public):
                found = (key, entry, item)
                break
        ended = self._ended.get(mark_key)
        mark = items[-1]
        value = mark.meta.get("endedAt") if mark is not None else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            ended = float(value) if ended is None else max(ended, float(value))
        entry = found[1] if found is not None else None
        return _Looked(found, decide_lookup("use", entry, self.clock(), ended))

    def _serve_fresh(self, looked: _Looked) -> tuple[CallToolResult, CallOutcome] | None:
        if not isinstance(looked.decision, ServeFresh) or looked.found is None:
            return None
        body = looked.found[2].body
        stored = decode_result(body)
        if stored is None:
            return None
        return stored, CallOutcome("fresh_hit", False, looked.decision.reason, bytes_saved=len(body))

    async def end_freshness(self, server_id: str, era: str | None = None) -> None:
        """End the freshness of every entry of `server_id` in this partition (their tags stay usable)."""
        identity = CallIdentity(server_id, self.partition, era or "", "", {})
        now = self.clock()
        mark_key = identity.mark_key()
        # Kept here as well as in the store: a store that fails to save the mark (or loses it to eviction)
        # must not make this process serve, as fresh, entries the server has since changed.
        self._ended[mark_key] = max(now, self._ended.get(mark_key, now))
        item = Item(meta={"endedAt": now}, body=b"", group="marks", created_at=now)
        await self._store.save(mark_key, item)

    async def _execute_once(
        self,
        conn: Connection,
        identity: CallIdentity,
        private_key: str,
        mode: CacheMode,
        user_meta: dict[str, Any] | None,
        looked: _Looked | None,
    ) -> tuple[CallToolResult, CallOutcome]:
        name, args = identity.tool, dict(identity.arguments)
        if looked is None and mode != "bypass":
            looked = await self._look(identity, private_key)
        found = looked.found if looked is not None else None
        entry = found[1] if found else None
        lookup = looked.decision if looked is not None and mode == "use" else decide_lookup(mode, entry, 0.0, None)

        if isinstance(lookup, ServeFresh) and found is not None:
            # Only a stored answer that cannot be read gets here (execute serves readable fresh ones).
            await self._store.remove(found[0])
            found, entry = None, None
            lookup = Fetch(store=True, reason="miss: the stored answer could not be read")

        sent_etag: str | None = None
        requested_at = self.clock()
        reply: CallToolResult | None = None
        if isinstance(lookup, Revalidate):
            sent_etag = lookup.etag
            conditional_meta = dict(user_meta or {})
            conditional_meta[self.meta_key] = {"etag": sent_etag}
            reply = await conn.send_conditional(name, args, conditional_meta)
            if reply is None:
                sent_etag = None
        if reply is None:
            reply = await conn.send_plain(name, args, user_meta)
        store_ok = lookup.store if isinstance(lookup, Fetch) else True
        reason = lookup.reason
        repeated = False
        while True:
            decision = self._decide(identity, entry, sent_etag, reply, requested_at, store_ok)
            if isinstance(decision, ServeStored):
                assert found is not None
                served = await self._serve_stored(conn, name, found, decision, reply, reason)
                if served is not None:
                    return served
                # The copy the server confirmed cannot be served: it goes, and the whole answer is asked for.
                await self._store.remove(found[0])
                found, entry = None, None
                why = "the stored answer could not be served"
            elif isinstance(decision, RepeatWithoutTag):
                why = decision.reason
                if repeated:
                    logger.warning("tool %r: %s; giving up", name, why)
                    status: Status = "bypass" if mode == "bypass" else "miss"
                    return _unanswerable(name), CallOutcome(status, False, f"{reason}; {why}")
            else:
                if sent_etag is not None and not reply.is_error:
                    # A full answer to a conditional call skipped the client's own output-schema check.
                    await conn.validate(name, reply)
                return await self._apply(conn, identity, private_key, found, decision, reply, mode, reason)
            logger.info("tool %r: %s; asking again without a tag", name, why)
            reason = f"{reason}; {why}; asked again without a tag"
            repeated = True
            sent_etag, requested_at = None, self.clock()
            reply = await conn.send_plain(name, args, user_meta)

    def _decide(
        self,
        identity: CallIdentity,
        entry: EntryMeta | None,
        sent_etag: str | None,
        reply: CallToolResult,
        requested_at: float,
        store: bool,
    ) -> ServeStored | StoreAnswer | ReturnUnstored | RepeatWithoutTag:
        block = parse_cache_block(reply.meta, self.meta_key)
        if block is not None and not block.not_modified and _claims_not_modified(reply.meta, self.meta_key):
            # The tolerant reading makes a malformed `notModified` false, which would store and return the
            # reply's empty stub as the answer. A claim in any form is a claim: it must match, or be asked again.
            block = block.model_copy(update={"not_modified": True})
        return decide_reply(
            tool=identity.tool,
            sent_etag=sent_etag,
            entry=entry,
            is_error=reply.is_error,
            block=block,
            size=0,  # filled in by _apply, which encodes the answer only if it is kept
            requested_at=requested_at,
            received_at=self.clock(),
            store=store,
        )

    def _expires_at(self, meta: EntryMeta) -> float:
        """When the store may drop the entry, on the store's clock (which judges it), not the cache's."""
        keep = self.keep_stale_s if meta.etag is not None else 0.0
        return self.store.now() + max(meta.fresh_until() - self.clock(), 0.0) + keep

    async def _apply(
        self,
        conn: Connection,
        identity: CallIdentity,
        private_key: str,
        found: tuple[str, EntryMeta, Item] | None,
        decision: StoreAnswer | ReturnUnstored,
        reply: CallToolResult,
        mode: CacheMode,
        lookup_reason: str,
    ) -> tuple[CallToolResult, CallOutcome]:
        name = identity.tool
        await self._after_server_answer(conn, name, reply)
        if isinstance(decision, ReturnUnstored):
            if decision.drop_entry and found is not None:
                await self._store.remove(found[0])
            status: Status = "bypass" if mode == "bypass" else "miss"
            return reply, CallOutcome(status, False, f"{lookup_reason}; {decision.reason}")

        body = encode_result(reply)
        meta = replace(decision.meta, size=len(body))
        if meta.scope == "public" and self.share_public:
            own, other = identity.key("public", share_public=True), private_key
        else:
            own, other = private_key, None
        item = Item(
            meta=meta.to_json(),
            body=body,
            group="tools",
            created_at=meta.received_at,
            expires_at=self._expires_at(meta),
        )
        if other is not None:
            await self._store.remove(other)
        elif found is not None and found[0] != own:
            await self._store.remove(found[0])
        await self._store.save(own, item)
        # It passed the client's check on its way in (the SDK's on an ordinary call, ours on a conditional
        # one), so its first serve here need not check it again.
        self._validated[(own, meta.etag or "", len(body))] = None
        return reply, CallOutcome("miss", True, f"{lookup_reason}; {decision.reason}")

    async def _serve_stored(
        self,
        conn: Connection,
        name: str,
        found: tuple[str, EntryMeta, Item],
        decision: ServeStored,
        reply: CallToolResult,
        lookup_reason: str,
    ) -> tuple[CallToolResult, CallOutcome] | None:
        """The stored copy with the fresh block, checked as the client checks any answer; None if it cannot be
        read or fails the check (a corrupt or foreign entry: never served, never a failed call)."""
        key, _, item = found
        stored = decode_result(item.body)
        if stored is None:
            return None
        result = _merged(stored, decision.block, self.meta_key)
        checked = (key, decision.meta.etag or "", len(item.body))
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
        await self._store.update_meta(key, meta.to_json(), self._expires_at(meta))
        saved = max(len(item.body) - len(encode_result(reply)), 0)
        return result, CallOutcome("revalidated", False, f"{lookup_reason}; {decision.reason}", saved)

    async def _after_server_answer(self, conn: Connection, name: str, reply: CallToolResult) -> None:
        answered_with_block = parse_cache_block(reply.meta, self.meta_key) is not None
        if answered_with_block:
            return
        read_only = await conn.read_only(name) if self.trusted else None
        if ends_freshness(read_only=read_only, trusted=self.trusted, answered_with_block=False):
            await self.end_freshness(conn.server_id, conn.era)
