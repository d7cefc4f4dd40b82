"""The gateway's history of answers it sent with tags, kept in its store so that any replica can send a
caller the change against an answer another replica sent (docs/gateway.md, "Delta replies").

The server half keeps its history in its own process (`mcpcache.server.history`); a gateway's replicas
share only their store, so this history is items of that store, through the one store interface:

- a version: key `h:<call>:<opaque tag>`, the answer as sent without its cache block, encoded as the tool
  cache encodes answers (`mcpcache.client.entries.encode_entry`: an answer whose text is its structured
  content's JSON is kept with that JSON once), its metadata holding the answer's size on the wire;
- a call's index: key `h:<call>`, metadata only, the opaque tags of the call's versions, oldest first.

`<call>` is a SHA-256 of (partition, upstream, protocol era, tool, canonical arguments): the same parts,
and the same partition, as the call's entry in the tool cache, so a version is found only by a caller
who may be served the entry it was sent as. Every item is in the store group `HISTORY_GROUP`.

Bounds. Bytes: after every version recorded, the group is trimmed to `max_bytes` (`Store.trim_group`, least
recently used first; a load of a version as a base, a record that finds it held, and a not-modified reply
that confirms it all count as its use). A version larger than half the bound is not kept (a delta needs two),
nor one larger than the largest answer the store keeps (`max_answer_bytes`).
Versions per call: recording a call's fifth version (`versions_per_key`) removes its oldest. The index is
read and written back without a lock: two replicas recording new versions of one call at the same moment
may each keep theirs (one index write wins), so a call can hold a version more than the bound until the
byte bound's trimming reaches it; the byte bound always holds.

A failing store is a miss, never a failed call: every operation goes through the store fence
(`mcpcache.stores.fence`, as the tool cache's do), with a deadline (`deadline_s`, plus `seconds_per_mb` for
every MB it moves); an exception or a missed deadline reads as "not held" or "not kept", a store that missed
a deadline is not asked again for `cooldown_s`, and an outage is one line, however many calls it costs.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

import anyio
import anyio.to_thread
import mcp_types as mt
import orjson
from cachetools import TTLCache

from mcpcache.client.entries import Encoded, decode_result, encode_entry
from mcpcache.client.keys import readable_server
from mcpcache.etag import meta_without_block
from mcpcache.protocol import META_KEY, opaque_tag
from mcpcache.server.deltas import THREAD_FROM_BYTES
from mcpcache.server.history import DEFAULT_HISTORY_BYTES, VERSIONS_PER_KEY
from mcpcache.stores.base import Store
from mcpcache.stores.fence import FencedStore, FenceSettings
from mcpcache.stores.items import DEFAULT_SECONDS_PER_MB, Item, Usage

__all__ = [
    "DEFAULT_HISTORY_BYTES",
    "HISTORY_GROUP",
    "VERSIONS_PER_KEY",
    "CallKey",
    "HistoryCounters",
    "StoreHistory",
]

logger = logging.getLogger("mcpcache.gateway")

HISTORY_GROUP: Final = "deltas"
"""The store group of the history's items (the tool cache's answers are in "tools")."""

_PREFIX: Final = "h:"

KNOWN_S: Final = 10.0
"""How long a version recorded or found held is taken as held without asking the store again: an answer
sent over and over (a stock client's reads, answers served fresh from the store) costs a store round trip
at most this often. Another replica's trimming may remove it meanwhile; a caller that then asks for a
delta against it gets the full answer."""
KNOWN_VERSIONS: Final = 4096


@dataclass(frozen=True)
class CallKey:
    """Which call's versions: the parts of its tool cache entry's key (the partition as the history keeps it:
    see `mcpcache.gateway.decisions.history_partition`)."""

    partition: str
    server: str
    era: str
    tool: str
    arguments: bytes
    """The canonical JSON of the arguments."""

    @cached_property
    def digest(self) -> str:
        # Strings only in the head, whose JSON is already canonical; the arguments after a separator no
        # JSON array holds, so no crafted value moves a field boundary.
        hashed = hashlib.sha256(orjson.dumps([self.partition, self.server, self.era, self.tool]))
        hashed.update(b"\x00")
        hashed.update(self.arguments)
        return hashed.hexdigest()

    @property
    def index_key(self) -> str:
        return _PREFIX + self.digest

    def version_key(self, opaque: str) -> str:
        return f"{_PREFIX}{self.digest}:{opaque}"


@dataclass
class HistoryCounters:
    """What the history did since the gateway started (this process)."""

    recorded: int = 0
    """Versions written to the store."""
    refused: int = 0
    """Answers not kept: larger than half the bound, or than the largest answer the store keeps."""
    dropped: int = 0
    """Versions removed because their call had `versions_per_key` newer ones."""
    trimmed: int = 0
    """Items evicted to keep the history within its byte bound."""
    failures: int = 0
    """Store operations that raised or missed their deadline (each a miss, never a failed call)."""


@dataclass
class StoreHistory:
    """The history over one store (see the module docstring). One per gateway process; its replicas share
    what it keeps through the store."""

    store: Store
    max_bytes: int = DEFAULT_HISTORY_BYTES
    versions_per_key: int = VERSIONS_PER_KEY
    max_answer_bytes: int | None = None
    """The largest version kept, in stored bytes, as for the store's answers (None: half of `max_bytes`)."""
    meta_key: str = META_KEY
    deadline_s: float = 1.0
    cooldown_s: float = 5.0
    seconds_per_mb: float = DEFAULT_SECONDS_PER_MB
    clock: Callable[[], float] = time.time
    counters: HistoryCounters = field(default_factory=HistoryCounters)
    _fence: FencedStore = field(init=False, repr=False)
    _known: TTLCache[str, int] = field(init=False, repr=False)
    """Version keys recorded or found held lately, with their answer's size."""
    _pending: dict[str, anyio.Event] = field(default_factory=dict, init=False, repr=False)
    """Versions being recorded now, by key: a second caller waits for the first's record."""

    def __post_init__(self) -> None:
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int) or self.max_bytes <= 0:
            raise ValueError(f"the history's bound must be a positive int of bytes, got {self.max_bytes!r}")
        if self.versions_per_key < 1:
            raise ValueError(f"versions_per_key must be >= 1, got {self.versions_per_key}")
        self._fence = FencedStore(
            self.store,
            who="delta history store",
            meanwhile="full answers instead of deltas",
            logger=logger,
            on_failure=self._count_failure,
            settings=FenceSettings(self.deadline_s, self.cooldown_s, self.seconds_per_mb),
            most_bytes=self.max_bytes,
        )
        self._known = TTLCache(maxsize=KNOWN_VERSIONS, ttl=KNOWN_S)

    def _count_failure(self) -> None:
        self.counters.failures += 1

    async def _peek(self, key: str) -> Item | bool | None:
        """The item without its body; None when not held; False when the store did not answer."""

        async def action() -> Item | bool | None:
            (item,) = await self.store.peek_many([key])
            return item

        return await self._fence.run("read", action, False)

    # What the gateway asks --------------------------------------------------------------------------

    async def touch(self, call: CallKey, tag: str) -> None:
        """A not-modified reply confirmed the version under `tag`: the caller holds it, a use of it (unless
        it was recorded or found held in the last `KNOWN_S` seconds)."""
        opaque = opaque_tag(tag)
        if opaque is None:
            return
        key = call.version_key(opaque)
        if key in self._known:
            return
        size = _size(await self._peek(key))
        if size is not None:
            self._known[key] = size

    async def base(self, call: CallKey, tag: str) -> mt.CallToolResult | None:
        """The answer sent under `tag` for `call`, decoded, or None (never sent, evicted, unreadable, or
        the store did not answer)."""
        opaque = opaque_tag(tag)
        if opaque is None:
            return None
        key = call.version_key(opaque)
        peeked = await self._peek(key)
        if not isinstance(peeked, Item):
            return None
        size = _size(peeked)  # the answer's size on the wire: its stored body is no larger

        item = await self._fence.load(key, moving=size or 0)
        if not isinstance(item, Item) or item.tag != opaque:
            return None
        if len(item.body) >= THREAD_FROM_BYTES:
            result = await anyio.to_thread.run_sync(decode_result, item.body)
        else:
            result = decode_result(item.body)
        if result is None:
            logger.warning("delta history: a version could not be decoded; full answer")
            return None
        return result

    async def record(self, call: CallKey, tag: str, result: mt.CallToolResult) -> int | None:
        """Keep `result` (an answer as sent; its cache block is left out) as the version sent under `tag`,
        unless it is held already. Returns the answer's size on the wire, or None when it is neither held
        nor kept (too large, or the store did not answer).

        Callers that get one new answer at once (the followers of one upstream call) record it once: the
        others wait for that record. A version recorded or found held in the last `KNOWN_S` seconds is
        not looked for again, so a stock client reading one answer over and over costs no store round
        trip for it."""
        opaque = opaque_tag(tag)
        if opaque is None:
            return None
        key = call.version_key(opaque)
        known = self._known.get(key)
        if known is not None:
            return known
        pending = self._pending.get(key)
        if pending is not None:
            await pending.wait()
            return self._known.get(key)
        self._pending[key] = done = anyio.Event()
        try:
            size = await self._record(call, opaque, key, result)
        finally:
            del self._pending[key]
            done.set()
        if size is not None:
            self._known[key] = size
        return size

    async def _record(self, call: CallKey, opaque: str, key: str, result: mt.CallToolResult) -> int | None:
        held = await self._peek(key)
        if held is False:
            return None  # a store that does not answer is not written to either
        if isinstance(held, Item) and (size := _size(held)) is not None:
            return size
        answer = result.model_copy(update={"meta": meta_without_block(result.meta, self.meta_key)})
        if sum(len(block.text) for block in answer.content if isinstance(block, mt.TextContent)) >= THREAD_FROM_BYTES:
            encoded = await anyio.to_thread.run_sync(encode_entry, answer)
        else:
            encoded = encode_entry(answer)
        item = self._version_item(call, opaque, encoded)
        if item.size > self.max_bytes // 2 or (self.max_answer_bytes is not None and item.size > self.max_answer_bytes):
            self.counters.refused += 1
            return None

        if not await self._fence.save(key, item):
            return None
        self.counters.recorded += 1
        await self._index(call, opaque)
        await self._trim()
        return encoded.size

    def _version_item(self, call: CallKey, opaque: str, encoded: Encoded) -> Item:
        return Item(
            meta={"size": encoded.size},
            body=encoded.body,
            group=HISTORY_GROUP,
            created_at=self.clock(),
            tag=opaque,
            server=readable_server(call.server),
            tool=call.tool,
        )

    async def _index(self, call: CallKey, opaque: str) -> None:
        """Put `opaque` last in the call's index, and remove the versions beyond `versions_per_key`."""
        index = await self._peek(call.index_key)
        if index is False:
            return
        tags = _tags(index) if isinstance(index, Item) else []
        tags = [held for held in tags if held != opaque] + [opaque]
        dropped, kept = tags[: -self.versions_per_key], tags[-self.versions_per_key :]
        now = self.clock()
        item = Item(meta={"tags": kept}, body=b"", group=HISTORY_GROUP, created_at=now, stamp=now)
        await self._fence.save(call.index_key, item)
        for old in dropped:
            await self._fence.remove(call.version_key(old))
            self.counters.dropped += 1

    async def _trim(self) -> None:
        self.counters.trimmed += await self._fence.trim_group(HISTORY_GROUP, self.max_bytes)

    async def usage(self) -> Usage:
        """The history's items and bytes in the store (all replicas' together)."""
        return await self.store.usage(HISTORY_GROUP)


def _size(item: Item | bool | None) -> int | None:
    if not isinstance(item, Item):
        return None
    size: Any = item.meta.get("size")
    return size if type(size) is int and size >= 0 else None


def _tags(item: Item) -> list[str]:
    tags: Any = item.meta.get("tags")
    if not isinstance(tags, list):
        return []
    return [tag for tag in tags if isinstance(tag, str)]
