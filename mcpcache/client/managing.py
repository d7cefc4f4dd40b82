"""What `ToolCache` offers for seeing and managing what is cached: invalidating calls and servers, ending
freshness, clearing, listing, and the bookkeeping of freshness ends the driver reads on every lookup.

A part `ToolCache` (`mcpcache.client.cache`) owns and hands its public methods to; it keeps the freshness
ends this process knows of, and reads and writes the rest through the cache's `Shelf`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from cachetools import LRUCache

from mcpcache.canonical import CanonicalizationError
from mcpcache.client.contracts import Declaring
from mcpcache.client.entries import TOOLS_GROUP, mark_item
from mcpcache.client.keyrules import KeyRules
from mcpcache.client.keys import CallIdentity, readable_server
from mcpcache.client.shelf import Shelf
from mcpcache.stores.items import Match

if TYPE_CHECKING:
    from mcpcache.client.inventory import CachedEntry

logger = logging.getLogger("mcpcache.client")

K = TypeVar("K")
V = TypeVar("V")

_MAX_REMEMBERED = 4096


def remember(memory: dict[K, V], key: K, value: V) -> None:
    """Set `key`, dropping the oldest entries past `_MAX_REMEMBERED`."""
    memory.pop(key, None)
    memory[key] = value
    while len(memory) > _MAX_REMEMBERED:
        del memory[next(iter(memory))]


class Managing:
    """Invalidation, freshness ends, clearing and listing for one cache, and the freshness ends its lookups
    read (`ended_here`)."""

    def __init__(self, shelf: Shelf, key_rules: KeyRules) -> None:
        self._shelf = shelf
        self._key_rules = key_rules
        self.partition = shelf.partition
        self.share_public = shelf.settings.share_public
        self.clock = shelf.clock
        self._tier = shelf.tier
        self._store = shelf.fenced
        self._deferred = shelf.deferred
        self._ended: LRUCache[str, float] = LRUCache(maxsize=4096)
        """When this process last ended freshness, by mark key (see `end_freshness`)."""
        self._invalidated: dict[str, float] = {}
        """When this process last invalidated a call, by its mark key (see `invalidate`); the oldest go first
        past `_MAX_REMEMBERED`. A plain dict: every lookup reads it, and most read it empty."""
        self._cleared_at: float | None = None
        """When this process last cleared the cache: every entry and flight older than that is not fresh here."""
        self.variants: dict[tuple[str, str, str], None] = {}
        """(server, era, variant) of the calls this process made, the oldest going first past
        `_MAX_REMEMBERED`: where an invalidation finds a call's keys. The driver notes each call's
        (`note_variant`), reading it first: most calls are of a variant noted before."""

    def note_variant(self, server_id: str, era: str, variant: str) -> None:
        """A call of `server_id` at `era` with `variant` was made: an invalidation looks for its keys there."""
        remember(self.variants, (server_id, era, variant), None)

    async def invalidate(
        self,
        tool: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        *,
        server_id: str,
        declaring: Declaring | None = None,
    ) -> None:
        """What `ToolCache.invalidate` does (its docstring says what that is)."""
        if tool is None:
            if arguments is not None:
                raise TypeError("arguments name one call of a tool: pass the tool as well")
            await self.end_freshness(server_id)
            await self._deferred.flush()  # a write still pending (a patched answer's) would land after the removal
            self._tier.discard_if(lambda held: held.server == server_id)
            # Not under the fence's deadline: a large removal may take longer than one call's store operation
            # should, and missing it would stop this process using the store for its cooldown. It is not what
            # makes the invalidation hold (the mark is); a store that fails it is worth a warning only.
            try:
                await self._shelf.store.remove_matching(Match(TOOLS_GROUP, server=readable_server(server_id)))
            except Exception:
                logger.warning("could not remove the entries of %s from the store", server_id, exc_info=True)
            return
        args = dict(arguments or {})
        # The call as this cache keys it (its key arguments, when known: the override, or what a trusted
        # server declared), and as a cache that keys it on every argument does.
        if declaring is not None:
            rule = await self._key_rules.rule(declaring, tool)
        else:
            rule = self._key_rules.known(server_id, tool)
        shapes = [KeyRules.identity(None, server_id, self.partition, "", tool, args, "")]
        if rule is not None and not rule.trivial:
            shapes.append(KeyRules.identity(rule, server_id, self.partition, "", tool, args, ""))
        for identity in shapes:
            try:
                call_mark = identity.call_mark_key()
            except CanonicalizationError:
                return  # arguments with no canonical form: such a call is never cached
            await self._invalidate_call(identity, call_mark)

    async def _invalidate_call(self, identity: CallIdentity, call_mark: str) -> None:
        now = self.clock()
        # Recorded here as well as in the store, as `end_freshness` does, and before anything is removed: from
        # this moment no lookup in this process takes what the call stored, or a flight sent before, as fresh.
        remember(self._invalidated, call_mark, max(now, self._invalidated.get(call_mark, now)))
        self._tier.discard_if(lambda held: held.call == call_mark)
        await self._store.save_persistently(call_mark, mark_item(now))
        for server, era, variant in list(self.variants.keys()):
            if server == identity.server:
                named = CallIdentity(
                    identity.server,
                    self.partition,
                    era,
                    identity.tool,
                    identity.arguments,
                    variant,
                    identity.projection,
                )
                for key in self.keys(named):
                    await self.remove(key)

    async def clear(self) -> int:
        """What `ToolCache.clear` does (its docstring says what that is)."""
        self._cleared_at = self.clock()
        # A write still pending (a patched answer's, returned before the clear) would otherwise land after the
        # removal and leave an entry other processes take for fresh: the clear writes no freshness mark.
        await self._deferred.flush()
        self._tier.clear()
        self._shelf.validated.clear()
        return await self._shelf.store.remove_matching(Match(TOOLS_GROUP))

    def entries(self, *, server: str | None = None, tool: str | None = None) -> AsyncIterator[CachedEntry]:
        """What `ToolCache.entries` does (its docstring says what that is)."""
        from mcpcache.client.inventory import cached_entries

        return cached_entries(self._shelf.store, server=server, tool=tool, clock=self.clock)

    def keys(self, identity: CallIdentity) -> list[str]:
        """The store keys `identity` may be kept under (its own arm, and the shared one when sharing)."""
        keys = [identity.key("private")]
        if self.share_public:
            keys.append(identity.key("public", share_public=True))
        return keys

    def ended_here(self, mark_key: str, call_mark: str) -> float | None:
        """When this process last ended the freshness of a call's entries: a mutation or notification (its
        server's), an invalidation (its own) or a clear (everything's), whichever came last."""
        latest = self._ended.get(mark_key)
        if not self._invalidated and self._cleared_at is None:
            return latest
        for at in (self._invalidated.get(call_mark), self._cleared_at):
            if at is not None and (latest is None or at > latest):
                latest = at
        return latest

    async def remove(self, key: str) -> None:
        self._tier.discard(key)
        await self._deferred.settled(key)
        await self._store.remove(key)

    async def end_freshness(self, server_id: str, era: str | None = None) -> None:
        """What `ToolCache.end_freshness` does (its docstring says what that is)."""
        identity = CallIdentity(server_id, self.partition, era or "", "", {})
        now = self.clock()
        mark_key = identity.mark_key()
        # Kept here as well as in the store: a store that fails to save the mark (or loses it to eviction)
        # must not make this process serve, as fresh, entries the server has since changed.
        self._ended[mark_key] = max(now, self._ended.get(mark_key, now))
        await self._store.save_persistently(mark_key, mark_item(now))
