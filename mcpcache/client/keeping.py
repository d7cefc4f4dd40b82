"""How `ToolCache` keeps an answer that came from the server: the size bound, the entry it stores, the
compare-and-set save, the decoded copy it holds, and the write behind a patched answer.

A part `ToolCache` (`mcpcache.client.cache`) owns: the driver's module holds the decisions' order, this one
what one stored answer costs. It reads and writes through the cache's `Shelf`, and removes entries and ends
freshness through the cache's `Managing`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import assert_never

import anyio
import mcp_types as mt
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from mcpcache.client.contracts import Connection
from mcpcache.client.entries import Found, encode_entry, entry_item, stored_size_at_least
from mcpcache.client.keys import CallIdentity, readable_server
from mcpcache.client.managing import Managing
from mcpcache.client.outcomes import CallOutcome, Status
from mcpcache.client.policy import (
    EndFreshness,
    EntryMeta,
    KeepFreshness,
    ReturnUnstored,
    StoreAnswer,
    decide_size,
    decide_unanswered,
    ends_freshness,
    store_arm,
)
from mcpcache.client.shelf import Shelf
from mcpcache.client.tier import copy_result, hold
from mcpcache.delta.tree import Leaves
from mcpcache.protocol import parse_cache_block
from mcpcache.sizes import bytes_saved, result_bytes
from mcpcache.stores.items import Item, body_checksum

__all__ = ["Keeping"]

logger = logging.getLogger("mcpcache.client")


class Keeping:
    """Keeping the answers one cache receives."""

    def __init__(self, shelf: Shelf, managing: Managing) -> None:
        settings = shelf.settings
        self._shelf = shelf
        self._managing = managing
        self.stats = shelf.stats
        self.clock = shelf.clock
        self.meta_key = settings.meta_key
        self.trusted = settings.trusted
        self.share_public = settings.share_public
        self.read_only_views = settings.read_only_views
        self.keep_stale_s = settings.keep_stale_s
        self.max_answer_bytes = settings.max_answer_bytes
        self._store = shelf.fenced
        self._tier = shelf.tier
        self._deferred = shelf.deferred
        self._leaves = shelf.leaves
        self._remove = managing.remove

    def expires_at(self, meta: EntryMeta) -> float:
        """When the store may drop the entry, on the store's clock (which judges it), not the cache's."""
        keep = max(self.keep_stale_s if meta.etag is not None else 0.0, meta.servable_stale_s())
        return self._shelf.store.now() + max(meta.fresh_until() - self.clock(), 0.0) + keep

    async def keep(
        self,
        conn: Connection,
        identity: CallIdentity,
        private_key: str,
        found: Found | None,
        decision: StoreAnswer | ReturnUnstored,
        reply: CallToolResult,
        status: Status,
        lookup_reason: str,
        *,
        patched_by: int | None = None,
        leaves: Leaves | None = None,
        size: int | None = None,
    ) -> tuple[CallToolResult, CallOutcome]:
        """Return `reply` and keep it as `decision` says. `patched_by`: `reply` was built from a delta reply
        of that many bytes (what it saved is the answer's bytes less those); `leaves`: its tree digest's leaf
        hashes, kept beside it once it is stored (`mcpcache.client.leaves`); `size`: a patched answer's bytes
        on the wire, counted from the ops (`mcpcache.client.patching.Patched.size`): it is then encoded for
        the store after it is returned, with the write."""
        await self._after_server_answer(conn, identity.tool, reply)
        encoded = None
        later = patched_by is not None and size is not None
        if isinstance(decision, StoreAnswer):
            # What is certainly too large is known without encoding it; anything else, once encoded.
            too_large = decide_size(stored_size_at_least(reply), self.max_answer_bytes, at_least=True)
            if too_large is None and not later:
                encoded = encode_entry(reply)
                too_large = decide_size(len(encoded.body), self.max_answer_bytes)
            decision = too_large or decision
        match decision:
            case ReturnUnstored():
                if decision.drop_entry and found is not None:
                    await self._remove(found.key)
                answer = size if size is not None else result_bytes(reply)
                saved = 0 if patched_by is None else bytes_saved(answer, patched_by)
                return reply, CallOutcome(status, False, f"{lookup_reason}; {decision.reason}", saved)
            case StoreAnswer():
                if encoded is None:
                    assert patched_by is not None
                    assert size is not None
                    return await self._keep_patched(
                        identity, private_key, found, decision, reply, status, lookup_reason, patched_by, leaves, size
                    )
            case _:
                assert_never(decision)
        body = encoded.body
        stored_bytes = len(body) if len(body) != encoded.size else 0
        marks = (identity.mark_key(), identity.call_mark_key())
        meta = replace(
            decision.meta,
            size=encoded.size,
            stored=stored_bytes,
            arguments=identity.readable_arguments(),
            marks=marks,
            era=identity.era,
        )
        own = await self._claim(identity, private_key, found, meta)
        item = entry_item(meta, body, self.expires_at(meta), server=readable_server(identity.server))
        await self._deferred.settled(own)
        saved = 0 if patched_by is None else bytes_saved(meta.size, patched_by)
        if patched_by is not None:
            # A patched answer is written after it is returned: the store write is most of what is left of
            # a read after an edit (about 50 ms for a 5 MB notebook on SQLite), and it only feeds later
            # lookups, which wait for it in this process (`Reader.look`) as for a revalidation's record. The held
            # copy is taken now, before the caller can change `reply`; the body is already encoded.
            copy = reply if self.read_only_views else copy_result(reply)

            async def write() -> None:
                if await self._save_and_hold(own, item, meta, identity, lambda: copy):
                    if leaves is not None:
                        self._leaves.put(own, meta.etag, body_checksum(item.body), leaves)
                else:
                    # The outcome counted it as stored when it was returned; the store kept a newer answer or failed.
                    self.stats.stored -= 1
                    self.stats.not_stored += 1
                    logger.info(
                        "tool %r: the patched answer was not stored: the store holds a newer one, or failed",
                        identity.tool,
                    )

            await self._deferred.start(own, write, "storing a patched answer")
            why = f"{decision.reason}, written to the store after the answer is returned"
            return reply, CallOutcome(status, True, f"{lookup_reason}; {why}", saved)
        # Kept decoded as a copy of its own: `reply` is the caller's to change (unless it promised not to).
        if not await self._save_and_hold(
            own, item, meta, identity, lambda: reply if self.read_only_views else copy_result(reply)
        ):
            trouble = self._store.trouble
            if not trouble:
                why = "not stored: the store holds a newer answer, or refused this one"
            else:  # the lookup may have said why already
                why = "not stored" if trouble in lookup_reason else f"not stored: the store {trouble}"
            return reply, CallOutcome(status, False, f"{lookup_reason}; {why}", saved)
        return reply, CallOutcome(status, True, f"{lookup_reason}; {decision.reason}", saved)

    async def _keep_patched(
        self,
        identity: CallIdentity,
        private_key: str,
        found: Found | None,
        decision: StoreAnswer,
        reply: CallToolResult,
        status: Status,
        lookup_reason: str,
        patched_by: int,
        leaves: Leaves | None,
        size: int,
    ) -> tuple[CallToolResult, CallOutcome]:
        """Return a patched answer whose size is known from the ops, and encode and write it after: the
        encode (about 10 ms for a 5 MB notebook) is most of what a read after an edit had left to do."""
        meta = replace(
            decision.meta,
            size=size,
            arguments=identity.readable_arguments(),
            marks=(identity.mark_key(), identity.call_mark_key()),
            era=identity.era,
        )
        own = await self._claim(identity, private_key, found, meta)
        await self._deferred.settled(own)
        # Taken now: `reply` is the caller's to change once returned (unless it promised not to).
        copy = reply if self.read_only_views else copy_result(reply)

        async def write() -> None:
            encoded = encode_entry(copy)
            if encoded.size != size:  # a base entry whose recorded size was not its answer's
                logger.warning("tool %r: a patched answer is %d bytes, not %d", identity.tool, encoded.size, size)
            kept = replace(
                meta, size=encoded.size, stored=len(encoded.body) if len(encoded.body) != encoded.size else 0
            )
            item = entry_item(kept, encoded.body, self.expires_at(kept), server=readable_server(identity.server))
            too_large = decide_size(len(encoded.body), self.max_answer_bytes)
            if too_large is None and await self._save_and_hold(own, item, kept, identity, lambda: copy):
                if leaves is not None:
                    self._leaves.put(own, kept.etag, body_checksum(item.body), leaves)
                return
            # The outcome counted it as stored when it was returned; it was too large, or the store kept a
            # newer answer or failed.
            self.stats.stored -= 1
            self.stats.not_stored += 1
            reason = too_large.reason if too_large is not None else "the store holds a newer one, or failed"
            logger.info("tool %r: the patched answer was not stored: %s", identity.tool, reason)
            if too_large is not None:
                # The base it supersedes goes, as for a full answer too large to keep; not `_remove`,
                # which would wait for this very write.
                await self._store.remove(own)

        await self._deferred.start(own, write, "storing a patched answer")
        why = f"{decision.reason}, encoded and written to the store after the answer is returned"
        return reply, CallOutcome(status, True, f"{lookup_reason}; {why}", bytes_saved(size, patched_by))

    async def _claim(self, identity: CallIdentity, private_key: str, found: Found | None, meta: EntryMeta) -> str:
        """The key an answer of `meta`'s scope is kept under, with the entries that would shadow it or that it
        replaces under another key removed, and its decoded copy dropped."""
        arm = store_arm(meta.scope, self.share_public)
        own = private_key if arm == "private" else identity.key("public", share_public=True)
        if arm == "public":
            await self._remove(private_key)  # the partition's own copy would shadow the shared one
        elif found is not None and found.key != own:
            await self._remove(found.key)
        self._tier.discard(own)
        return own

    async def _save_and_hold(
        self, own: str, item: Item, meta: EntryMeta, identity: CallIdentity, copy: Callable[[], CallToolResult]
    ) -> bool:
        """Save `item` under `own`; once saved, hold its answer (`copy()`) decoded. Whether it was saved."""
        if not await self._store.save(own, item):
            return False
        body = item.body
        checksum = body_checksum(body)
        if self._tier.admits(len(body)):
            call = identity.call_mark_key()
            held = hold(copy(), body, meta.etag, checksum, server=identity.server, call=call, answer=meta.size)
            self._tier.put(own, held)
        # It passed the client's check on its way in, so its first serve here need not check it again.
        self._shelf.validated[(own, meta.etag or "", checksum)] = None
        return True

    async def after_unanswered(
        self, conn: Connection, name: str, exc: BaseException, *, read_only: bool | None, stored: bool
    ) -> None:
        """A call failed once its request may have left (`exc`): its outcome is unknown, so it ends freshness,
        in this process and in the store, as an answered write would (`decide_unanswered`). Even when the
        failure is the caller's cancellation: the mark is written shielded, within the store's deadline."""
        decision = decide_unanswered(failure=_failure_of(exc), read_only=read_only, trusted=self.trusted, stored=stored)
        match decision:
            case EndFreshness():
                logger.info("tool %r: %s", name, decision.reason)
                with anyio.CancelScope(shield=True):
                    await self._managing.end_freshness(conn.server_id, conn.era)
            case KeepFreshness():
                logger.debug("tool %r: %s", name, decision.reason)
            case _:
                assert_never(decision)

    async def _after_server_answer(self, conn: Connection, name: str, reply: CallToolResult) -> None:
        answered_with_block = parse_cache_block(reply.meta, self.meta_key) is not None
        if answered_with_block:
            return
        read_only = await conn.read_only(name) if self.trusted else None
        if ends_freshness(read_only=read_only, trusted=self.trusted, answered_with_block=False):
            await self._managing.end_freshness(conn.server_id, conn.era)


def _failure_of(exc: BaseException) -> str:
    """How a call whose request may have left failed, in words."""
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return "the call was cancelled"
    if isinstance(exc, MCPError) and exc.code == mt.REQUEST_TIMEOUT:
        return "the call timed out"
    if isinstance(exc, MCPError) and exc.code == mt.CONNECTION_CLOSED:
        return "the call's exchange was lost"
    return f"the call failed ({type(exc).__name__})"
