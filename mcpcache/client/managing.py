"""What `ToolCache` offers for seeing and managing what is cached: invalidating calls and servers, ending
freshness, clearing, listing, and the bookkeeping of freshness ends the driver reads on every lookup.

A base class of `ToolCache` (`mcpcache.client.cache`), kept apart so that the driver's module holds the
driver; it uses the cache's state, declared here.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from cachetools import LRUCache

from mcpcache.canonical import CanonicalizationError
from mcpcache.client.background import Deferred
from mcpcache.client.contracts import Declaring
from mcpcache.client.entries import TOOLS_GROUP, mark_item
from mcpcache.client.keyrules import KeyRules
from mcpcache.client.keys import CallIdentity, readable_server
from mcpcache.client.tier import DecodedTier
from mcpcache.stores.base import Store
from mcpcache.stores.fence import FencedStore
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
    """Invalidation, freshness ends, clearing and listing, over the state `ToolCache` sets up."""

    store: Store
    partition: str
    share_public: bool
    clock: Callable[[], float]
    _tier: DecodedTier
    _store: FencedStore
    _deferred: Deferred
    _validated: LRUCache[tuple[str, str, str], None]
    _ended: LRUCache[str, float]
    _invalidated: dict[str, float]
    _cleared_at: float | None
    _variants: dict[tuple[str, str, str], None]
    _key_rules: KeyRules

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
                await self.store.remove_matching(Match(TOOLS_GROUP, server=readable_server(server_id)))
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
        for server, era, variant in list(self._variants.keys()):
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
                for key in self._keys(named):
                    await self._remove(key)

    async def clear(self) -> int:
        """Remove every tool answer the store holds (every server, every partition); returns how many.

        The freshness marks stay, so nothing cached before is ever taken for fresh again, and in this process
        no call shares a request sent before the clear. A failing store raises: unlike a call, a clear that
        did not happen must not look as if it had.
        """
        self._cleared_at = self.clock()
        # A write still pending (a patched answer's, returned before the clear) would otherwise land after the
        # removal and leave an entry other processes take for fresh: the clear writes no freshness mark.
        await self._deferred.flush()
        self._tier.clear()
        self._validated.clear()
        return await self.store.remove_matching(Match(TOOLS_GROUP))

    def entries(self, *, server: str | None = None, tool: str | None = None) -> AsyncIterator[CachedEntry]:
        """What the store holds, a page at a time, each as a person reads it (see `mcpcache cache ls`):
        `server` is an entry's readable server label, as listed."""
        from mcpcache.client.inventory import cached_entries

        return cached_entries(self.store, server=server, tool=tool, clock=self.clock)

    def _keys(self, identity: CallIdentity) -> list[str]:
        """The store keys `identity` may be kept under (its own arm, and the shared one when sharing)."""
        keys = [identity.key("private")]
        if self.share_public:
            keys.append(identity.key("public", share_public=True))
        return keys

    def _ended_here(self, mark_key: str, call_mark: str) -> float | None:
        """When this process last ended the freshness of a call's entries: a mutation or notification (its
        server's), an invalidation (its own) or a clear (everything's), whichever came last."""
        latest = self._ended.get(mark_key)
        if not self._invalidated and self._cleared_at is None:
            return latest
        for at in (self._invalidated.get(call_mark), self._cleared_at):
            if at is not None and (latest is None or at > latest):
                latest = at
        return latest

    async def _remove(self, key: str) -> None:
        self._tier.discard(key)
        await self._deferred.settled(key)
        await self._store.remove(key)

    async def end_freshness(self, server_id: str, era: str | None = None) -> None:
        """End the freshness of every entry of `server_id` in this partition (their tags stay usable)."""
        identity = CallIdentity(server_id, self.partition, era or "", "", {})
        now = self.clock()
        mark_key = identity.mark_key()
        # Kept here as well as in the store: a store that fails to save the mark (or loses it to eviction)
        # must not make this process serve, as fresh, entries the server has since changed.
        self._ended[mark_key] = max(now, self._ended.get(mark_key, now))
        await self._store.save_persistently(mark_key, mark_item(now))
