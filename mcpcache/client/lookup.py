"""Reading what the store holds for one call: the lookup (`Looked`), the stored answer it names, and the fresh
check made without awaiting anything (`fresh_now`, the hot path).

A part `ToolCache` (`mcpcache.client.cache`) owns. It reads through the cache's `Shelf` and takes the
freshness ends this process knows of, and the removal of entries that are not this call's, from the cache's
`Managing`.
"""

from __future__ import annotations

from dataclasses import replace

from mcp_types import CallToolResult

from mcpcache.client.entries import Found, decode_result
from mcpcache.client.keys import Arm, CallIdentity
from mcpcache.client.managing import Managing
from mcpcache.client.outcomes import CallOutcome
from mcpcache.client.path import Looked, Served, Unserved
from mcpcache.client.policy import CacheMode, Fetch, ServeFresh, decide_lookup, freshness_ended_at, may_serve
from mcpcache.client.shelf import Shelf
from mcpcache.client.tier import hold

__all__ = ["Reader"]


class Reader:
    """The lookups of one cache."""

    def __init__(self, shelf: Shelf, managing: Managing) -> None:
        self._managing = managing
        self._raw = shelf.store
        self._store = shelf.fenced
        self._tier = shelf.tier
        self._deferred = shelf.deferred
        self.clock = shelf.clock
        self.share_public = shelf.settings.share_public
        self.read_only_views = shelf.settings.read_only_views

    def fresh_now(self, identity: CallIdentity, key: str) -> Served | None:
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
            items = self._raw.peek_now([key, mark_key, call_mark])
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
            self._managing.ended_here(mark_key, call_mark),
            server_mark.meta.get("endedAt") if server_mark is not None else None,
            call_mark_item.meta.get("endedAt") if call_mark_item is not None else None,
            self.lost_at([key, mark_key, call_mark]),
        )
        now = self.clock()
        decision = decide_lookup("use", entry, now, ended)
        if not isinstance(decision, ServeFresh):
            return None
        result = held.result if self.read_only_views else held.copy()
        left_ms = max(0, int((entry.fresh_until() - now) * 1000))
        return result, CallOutcome("fresh_hit", False, decision.reason, entry.size, fresh_for_ms=left_ms)

    async def look(self, identity: CallIdentity, private_key: str, mode: CacheMode) -> Looked:
        """The entry this partition may be served (its own arm first, then the shared one), when freshness
        last ended, and what to do about it, all from one round trip to the store for the metadata only.
        The body is loaded when an answer is to be served (`answer_of`), within a deadline scaled to the
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
            return Looked(None, now, decision)
        found: Found | None = None
        for (arm, key), item in zip(arms, items, strict=False):
            if item is None:
                self._tier.discard(key)
                continue
            entry = self._tier.entry_of(key, item.meta)
            if entry is None or entry.tool != identity.tool:
                await self._managing.remove(key)  # not a record this cache wrote for this call
                continue
            if may_serve(entry, arm, self.share_public):
                decoded = self._tier.get(key, item.tag, item.checksum)
                found = Found(key, arm, entry, item, decoded, identity.server, call_mark)
                break
        server_mark, call_mark_item = items[-2], items[-1]
        ended = freshness_ended_at(
            self._managing.ended_here(mark_key, call_mark),
            server_mark.meta.get("endedAt") if server_mark is not None else None,
            call_mark_item.meta.get("endedAt") if call_mark_item is not None else None,
            self.lost_at(keys),
        )
        entry = found.entry if found is not None else None
        return Looked(found, ended, decide_lookup(mode, entry, self.clock(), ended))

    def lost_at(self, keys: list[str]) -> float | None:
        """When the store may have lost writes to these keys (a Redis failover or restart), on this cache's
        clock: a freshness mark may have been among them, so it counts as a freshness end (an entry whose
        freshness was granted before it is revalidated, never served fresh)."""
        lost = self._raw.lost_before(keys)
        return None if lost is None else self.clock() - max(0.0, self._raw.now() - lost)

    async def answer_of(self, found: Found) -> CallToolResult | Unserved:
        """A private copy of the stored answer `found` names (with `read_only_views`, the held answer itself):
        from the decoded tier when it holds this version; otherwise its body is loaded (within a deadline
        scaled to the size the lookup read) and decoded, and the decoding kept in the tier."""
        if found.decoded is not None:
            return found.decoded.result if self.read_only_views else found.decoded.copy()
        loaded = await self._store.look([found.key], moving=found.entry.stored_bytes)
        if loaded is None:
            return Unserved.STORE_FAILED
        item = loaded[0]
        if item is None or item.tag != found.item.tag or item.checksum != found.item.checksum:
            return Unserved.GONE
        body = item.body
        stored = decode_result(body)
        if stored is None:
            return Unserved.UNREADABLE
        if not self._tier.admits(len(body)) or not item.checksum:
            return stored
        held = hold(
            stored, body, item.tag, item.checksum, server=found.server_id, call=found.call, answer=found.entry.size
        )
        self._tier.put(found.key, held)
        return stored if self.read_only_views else held.copy()

    async def serve_fresh(self, looked: Looked) -> Served | Unserved:
        assert looked.found is not None
        stored = await self.answer_of(looked.found)
        if isinstance(stored, Unserved):
            return stored
        left_ms = max(0, int((looked.found.entry.fresh_until() - self.clock()) * 1000))
        saved = looked.found.entry.size
        outcome = CallOutcome("fresh_hit", False, looked.decision.reason, saved, fresh_for_ms=left_ms)
        return stored, outcome

    async def unserved(self, looked: Looked, why: Unserved) -> Looked:
        """A stored answer that could not be served: one that cannot be decoded goes; the call is a miss."""
        assert looked.found is not None
        if why is Unserved.UNREADABLE:
            await self._managing.remove(looked.found.key)
        return looked.unserved(why)
