"""The shared store: one Redis holds items for many processes and hosts.

Redis expires items itself (PEXPIREAT from `Item.expires_at`), and every operation that touches more than
one key runs as a single Lua script, so another client never sees an item without its index entries or
the other way round. The stamp and tag comparisons of `save` and `update_meta` run inside the script that
writes, so no other client's command runs between the comparison and the change; stamps travel as
`repr(float)` and are compared as numbers.

Lua in Redis has no xxh3, so the body's checksum is computed here before a save and verified here after a
load; a corrupt record is deleted by a script that first checks the record is still the one that was read
(its save version), so an item another client saved meanwhile survives.

The keys, and the indexes that make group operations and LRU trimming cheap:

- `i:<key>`     hash: the item itself, with the Redis expiry. Fields: m meta, b body, g group, c created,
                x expiry, t tag (absent for None), s stamp, k checksum, v save version (a `tick`), z size,
                sv and tl the server and tool labels (absent in items saved before they were kept: "").
                It describes itself fully: the indexes below can all be rebuilt from the items.
- `d`           hash key -> "<size> <group>": the directory, the index's authority (an item is indexed,
                and counted, exactly when it has an entry here). It also holds its mark, under the field
                0xFF (no UTF-8 item key takes it): "whole" once a count has found every item held indexed
- `lru`         sorted set key -> use tick, the whole namespace (for the optional global bound)
- `g:<group>`   sorted set key -> use tick (group LRU order, trim_group, remove_group)
- `c:<group>`   sorted set key -> created_at (remove_created_before)
- `groups`      sorted set of group names, all scored 0 so they sort by name (group prefixes)
- `x`           sorted set key -> expiry in ms: index entries of items Redis already expired are dropped
                at the start of the next operation, judged by the Redis server's own clock
- `u`           hash of item and byte counts, per group and in total
- `tick`        the use counter: strictly ordered even for uses within one millisecond
- `sweep`       where the next write's sweep of the index starts

- `epoch`       hash: which server process serves the shard (run id and replication id), and since when

Every key starts with its shard's prefix, a hash tag: `{<namespace>}:` on one Redis, where the namespace
is one shard. The scripts derive key names from the data, so every key one script touches shares one tag
(one cluster slot).

On a Redis Cluster (a `redis+cluster://` URL or a `RedisCluster` client) a namespace is 16 shards, the
prefixes `{<namespace>/<n>}:` (`mcpcache.stores.redis_shards`), whose tags hash to slots spread evenly over
the 16384, so the primaries holding them share the namespace's items and load. A key's shard is a hash of
the key. Each shard holds its items with all of the bookkeeping above for them, so everything the contract
asks of one item stays one script on one node: a save with its index entries and its stamp comparison, an
update with its tag comparison, a load with its use, a corrupt record's removal. What spans the namespace
is done shard by shard and summed: `usage`, the group removals, counting and listing (a cursor names a
shard and its place in it), `remove_all`. Each is whole (every shard is asked) but not one atomic moment
across shards; one shard's answer is, as on one Redis.

Bounds (`StoreLimits`) on a cluster are enforced by the store across shards, after the write: it asks every
shard for its counts and its least recently used items, drops the namespace's least recently used until
the counts fit (each only if it was not used meanwhile), and asks again while they do not. Uses are ordered
by the servers' clocks in microseconds, so least recently used is judged across nodes as closely as their
clocks agree. The bound holds whenever no write is under way; writes that overlap may together exceed it
until the last of them has evicted. Each bounded write costs a round trip to every shard (16 scripts, sent
at once); unbounded namespaces (the default, with Redis's own `maxmemory`) pay nothing for it. On one Redis
the script enforces the bounds itself, atomically with the write.

Replication is asynchronous, so a failover (a replica promoted) or a restart of a persistent server can lose
writes Redis acknowledged, a freshness mark among them: an entry would then look fresh though its freshness
ended. Each shard notes which server process serves it (run id and replication id, from INFO) and since
when; a load or peek that finds another process serving sets `since` to now. `lost_before(keys)` is the
latest `since` of the keys' shards: the tool cache treats it as a freshness end, so an entry whose freshness
was granted before a failover is revalidated before it is served fresh again (once; afterwards it is fresh
by the new process's record). A shard with no note yet is new or was emptied: on one Redis that lost
nothing another shard depends on; on a cluster it counts as a change.

Redis's own `maxmemory` eviction may remove any of these keys, and the store keeps working:
- An item Redis evicted leaves index entries behind. Each save checks the least recently used entries
  (where an LRU eviction strikes), while they keep turning out stale, and 8 more at a cursor that walks the
  whole index, and unindexes what is gone; `usage` first walks the index it reports on in full. So the
  index stays close to the items held, and Redis's memory under its cap.
- An item found without its directory entry is served and indexed again from its own fields.
- If Redis evicts the directory, the rest of the index is dropped (it no longer says anything true) and
  items are indexed again as they are loaded, or all at once by the next `usage`; if it evicts another
  index key, the index is rebuilt from the directory. Only `allkeys-*` policies can do this: the index
  keys carry no expiry, so `volatile-*` policies never evict them (and the sweeps bound their size).
  Under `allkeys-lru` they are in use on every operation, but Redis's LRU clock counts in seconds and
  samples keys, so they tie with every item used in the same second and do get evicted.
- A count knows the directory holds every item held only from the directory's own mark, which Redis can
  evict only together with the directory: a note kept in any other key could go first, or with it, and
  leave the loss unnoticed.
- With a `volatile-*` policy, items need an expiry to be evictable at all: see `idle_ttl_s`.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from importlib import resources
from typing import Any, Literal, TypeVar

import anyio

from mcpcache.extras import needs

with needs("redis", "the Redis store"):
    import redis.asyncio
    import redis.exceptions
    from redis.asyncio.cluster import ClusterNode
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

from mcpcache.stores.base import Store
from mcpcache.stores.circuit import Circuit
from mcpcache.stores.items import (
    DEFAULT_PAGE_SIZE,
    DEFAULT_SECONDS_PER_MB,
    Item,
    Listed,
    Match,
    Page,
    StoreLimits,
    Usage,
    body_checksum,
    check_stamp,
    encode_meta,
    transfer_budget_s,
)
from mcpcache.stores.redis_records import (
    decode_fields,
    expiry,
    glob_escape,
    matching,
    scan_cursor,
    tag,
    text,
    version,
)
from mcpcache.stores.redis_shards import (
    CLUSTER_SHARDS,
    Candidate,
    choose_evictions,
    cluster_cursor,
    parse_cluster_cursor,
    parse_cluster_url,
    redis_url_kind,
    shard_of,
    shard_prefixes,
)

logger = logging.getLogger("mcpcache.stores.redis")

T = TypeVar("T")

_SCRIPT = resources.files("mcpcache.stores").joinpath("redis.lua").read_text(encoding="utf-8")
"""Every operation of the store, dispatched on ARGV[2]: one Lua script, so each operation is atomic in Redis."""


class RedisUnavailable(redis.exceptions.ConnectionError):
    """Raised without asking Redis: it recently did not answer within the store's socket timeout, and the
    store's circuit keeps it from being asked again until `cooldown_s` has passed."""


AUTO: Literal["auto"] = "auto"
"""`idle_ttl_s="auto"`: an idle expiry (`AUTO_IDLE_TTL_S`) only while Redis evicts by a `volatile-*` policy."""

AUTO_IDLE_TTL_S = 30 * 24 * 3600.0
POLICY_RECHECK_S = 60.0
"""How long the store trusts the `maxmemory_policy` it read (for `idle_ttl_s="auto"`)."""

DEFAULT_SOCKET_TIMEOUT_S = 0.5
DEFAULT_CONNECT_TIMEOUT_S = 0.5
DEFAULT_COOLDOWN_S = 5.0

_SCAN_COUNT = 500
"""Directory entries one count or removal step looks at (one script run: short, so Redis never blocks long)."""

_WHOLE_ATTEMPTS = 3
"""Scans one count makes while Redis keeps evicting the directory under it; past them it counts what is indexed."""

_INLINE_BODY_BYTES = 1_000_000
"""A load's first request takes a body up to this size along; a larger one is asked for again, with a
timeout for its length (one more round trip, against a transfer of milliseconds per MB)."""

_MOST_BODY_BYTES = 512 * 1024 * 1024
"""Redis's own bound on one value (`proto-max-bulk-len`): no body is larger, whatever a record says."""

_EVICTION_LOOK = 8
"""Least recently used items each shard shows an eviction across shards per round."""

_EVICTION_STALLS = 3
"""Rounds of an eviction across shards that may drop nothing (every item it chose was used meanwhile)."""

RedisClient = redis.asyncio.Redis | AsyncRedisCluster
"""A client the store takes: one Redis, or a Redis Cluster."""


class RedisStore(Store):
    """A store in Redis, shared by every process that names the same server (or cluster) and namespace.

    Pass a URL (the store then owns its client): `redis://`, `rediss://` or `unix://` for one Redis (or
    Valkey), `redis+cluster://host:port[,host:port...]` or `rediss+cluster://...` for a Redis Cluster, whose
    primaries then share the namespace (see the module docstring). Or pass a client of your own, a
    `redis.asyncio.Redis` or a `redis.asyncio.RedisCluster`, which must not decode responses and which
    `close()` leaves open. `limits` is optional: Redis's own `maxmemory` may bound it instead;
    `trim_group` works either way.

    The store fails fast, because a cache that stalls is worse than a miss:
    - `socket_timeout_s` (default 0.5 s) bounds every operation, and `connect_timeout_s` (0.5 s) every
      connection attempt. 0.5 s is half the tool cache's store deadline (1 s), so the store's own error,
      and its circuit, come before the cache gives up on the operation; it is still hundreds of times a
      loopback or LAN round trip and far above what any of the store's scripts takes on a healthy server.
    - An operation that moves a body gets `seconds_per_mb` (default 0.05 s) more for every MB of it, as
      the tool cache's deadline does: a save knows its body's length, and a load whose body is larger
      than 1 MB learns it from Redis first and asks again with the longer timeout. (A 50 MB body takes
      about a second to cross; a fixed 0.5 s would fail every such load.) The store applies these bounds
      itself, so a client you pass keeps its own socket timeout as well: leave it unset, or large enough
      for your largest bodies.
    - A command is retried once, at once, only when its connection failed (a connection the server
      closed, for instance after a restart); a timeout is never retried, since a retry would double a stall.
    - After a timeout the store raises `RedisUnavailable` at once, without asking Redis, for `cooldown_s`
      (default 5 s, as the store fence's own circuit), then asks again: a frozen server costs a caller
      without a fence (the MCP SDK's response cache) one timeout per cool-down, not one per call. This
      circuit also guards a caller's client, whose own timeouts decide when it trips. On a cluster each
      shard has its own circuit: a primary that froze costs only the shards it serves.

    Every key the store writes may be evicted by Redis's `maxmemory` policy without breaking it (see the
    module docstring). With a `volatile-*` policy Redis evicts only keys with an expiry, so items saved
    without one get an idle expiry: `idle_ttl_s` past their last use. The default, "auto", gives them
    `AUTO_IDLE_TTL_S` (30 days) while the server's policy is `volatile-*` (read with INFO, at most once a
    minute) and none otherwise; a number always applies it, None never does.
    """

    def __init__(
        self,
        url_or_client: str | RedisClient,
        *,
        namespace: str = "mcpcache",
        limits: StoreLimits | None = None,
        socket_timeout_s: float = DEFAULT_SOCKET_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        idle_ttl_s: float | Literal["auto"] | None = AUTO,
        seconds_per_mb: float = DEFAULT_SECONDS_PER_MB,
    ) -> None:
        if not namespace or "{" in namespace or "}" in namespace:
            raise ValueError(f"namespace must be non-empty and free of braces, got {namespace!r}")
        for name, value in (("socket_timeout_s", socket_timeout_s), ("connect_timeout_s", connect_timeout_s)):
            if not (isinstance(value, int | float) and value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        for name, value in (("cooldown_s", cooldown_s), ("seconds_per_mb", seconds_per_mb)):
            if not (
                isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 and math.isfinite(value)
            ):
                raise ValueError(f"{name} must be >= 0 seconds, got {value!r}")
        if (
            idle_ttl_s != AUTO
            and idle_ttl_s is not None
            and not (isinstance(idle_ttl_s, int | float) and idle_ttl_s >= 0.001 and math.isfinite(idle_ttl_s))
        ):
            raise ValueError(f"idle_ttl_s must be 'auto', None or at least 0.001 seconds, got {idle_ttl_s!r}")
        self._client: RedisClient
        if isinstance(url_or_client, str):
            self._client = _open_client(url_or_client, connect_timeout_s)
            self._owns_client = True
        else:
            if _decodes(url_or_client):
                raise ValueError("RedisStore needs a client with decode_responses=False: bodies are bytes")
            self._client = url_or_client
            self._owns_client = False
        self.clustered = isinstance(self._client, AsyncRedisCluster)
        """Whether the namespace is spread over a Redis Cluster's shards (see the module docstring)."""
        self.namespace = namespace
        self.limits = limits if limits is not None else StoreLimits()
        self.socket_timeout_s = float(socket_timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.seconds_per_mb = float(seconds_per_mb)
        self.cooldown_s = float(cooldown_s)
        self.idle_ttl_s = idle_ttl_s
        self._prefixes = shard_prefixes(namespace, CLUSTER_SHARDS if self.clustered else 1)
        self._prefix = self._prefixes[0]
        self._alone = "0" if self.clustered else "1"
        self._script = self._client.register_script(_SCRIPT)
        self._circuits = [Circuit(self.cooldown_s) for _ in self._prefixes]
        self._since = [0.0 for _ in self._prefixes]
        self._idle_arg = "" if idle_ttl_s is None or idle_ttl_s == AUTO else str(math.ceil(float(idle_ttl_s) * 1000))
        self._policy_read_at: float | None = None

    @property
    def circuit_open(self) -> bool:
        """Whether the store is refusing operations after a timeout (see `cooldown_s`): on a cluster, whether
        any shard's circuit is open."""
        return any(circuit.is_open for circuit in self._circuits)

    @property
    def client(self) -> RedisClient:
        return self._client

    @property
    def shards(self) -> int:
        """How many shards the namespace is laid over: 1 on one Redis, `CLUSTER_SHARDS` on a cluster."""
        return len(self._prefixes)

    def shard_of(self, key: str) -> int:
        return shard_of(key, len(self._prefixes))

    def item_key(self, key: str) -> str:
        """The Redis key holding one item's hash (for tools and tests that look underneath)."""
        return self._prefixes[self.shard_of(key)] + "i:" + key

    def shard_key(self, shard: int, name: str) -> str:
        """The Redis key of one of a shard's own records (`epoch`, `d`, ...), for tools and tests."""
        return self._prefixes[shard] + name

    def lost_before(self, keys: Sequence[str]) -> float | None:
        """The latest moment before which writes to these keys that Redis acknowledged may have been lost: when
        the server process now serving their shards was first seen serving them (a failover or a restart), as
        the store's last read of each shard found it. None when no read found one (see the module
        docstring)."""
        latest = max((self._since[self.shard_of(key)] for key in keys), default=0.0)
        return latest if latest > 0 else None

    def _saw(self, shard: int, since: object) -> None:
        value = int(since) / 1000 if isinstance(since, bytes | int) else 0.0
        self._since[shard] = max(self._since[shard], value)

    async def load(self, key: str) -> Item | None:
        shard = self.shard_of(key)
        since, fields = await self._call(shard, "load", key, _INLINE_BODY_BYTES, moving=_INLINE_BODY_BYTES)
        self._saw(shard, since)
        if isinstance(fields, list) and len(fields) == 1:
            # Too large to come along: asked for again, with a timeout for the length Redis holds.
            since, fields = await self._call(shard, "load", key, "", moving=int(fields[0]))
            self._saw(shard, since)
        if fields is None:
            return None
        item, fault = decode_fields(fields)
        if item is None:
            logger.warning("Redis namespace %r: dropping a corrupt record under key %r: %s", self.namespace, key, fault)
            await self._call(shard, "drop_corrupt", key, version(fields))
        return item

    async def peek_many(self, keys: Sequence[str]) -> list[Item | None]:
        if not keys:
            return []
        by_shard: dict[int, list[int]] = {}
        for at, key in enumerate(keys):
            by_shard.setdefault(self.shard_of(key), []).append(at)
        shards = list(by_shard)
        # One script per shard (all of them at once): each shard's keys are read at one moment.
        replies = await self._each(shards, lambda shard: ("peek", *(keys[at] for at in by_shard[shard])))
        items: list[Item | None] = [None] * len(keys)
        for shard, reply in zip(shards, replies, strict=True):
            self._saw(shard, reply[0])
            for at, fields in zip(by_shard[shard], reply[1:], strict=True):
                if not fields:
                    continue
                # The load's field order, with an empty body in its place (not read, so not verified).
                item, fault = decode_fields([fields[0], b"", *fields[1:]], verify=False)
                if item is None:
                    logger.warning(
                        "Redis namespace %r: dropping a corrupt record under key %r: %s",
                        self.namespace,
                        keys[at],
                        fault,
                    )
                    await self._call(shard, "drop_corrupt", keys[at], version(fields))
                items[at] = item
        return items

    async def save(self, key: str, item: Item) -> bool:
        stamp = check_stamp(item.stamp)
        meta = encode_meta(item.meta)
        stored = await self._call(
            self.shard_of(key),
            "save",
            key,
            meta,
            item.body,
            item.group,
            repr(float(item.created_at)),
            *expiry(item.expires_at),
            len(meta) + len(item.body),
            *self._bounds(),
            *tag(item.tag),
            repr(stamp),
            body_checksum(item.body),
            item.server,
            item.tool,
            moving=len(item.body),
        )
        if stored:
            await self._make_room()
        return bool(stored)

    async def update_meta(
        self,
        key: str,
        meta: Mapping[str, Any],
        expires_at: float | None,
        *,
        if_tag: str | None = None,
        stamp: float | None = None,
    ) -> bool:
        new_stamp = "" if stamp is None else repr(check_stamp(stamp))
        updated = await self._call(
            self.shard_of(key),
            "update_meta",
            key,
            encode_meta(meta),
            *expiry(expires_at),
            *self._bounds(),
            *tag(if_tag),
            new_stamp,
        )
        if updated:
            await self._make_room()
        return bool(updated)

    async def remove(self, key: str) -> None:
        await self._call(self.shard_of(key), "remove", key)

    async def remove_group(self, group: str) -> int:
        return sum(int(n) for n in await self._each(self._all(), lambda _: ("remove_group", group)))

    async def remove_created_before(self, group_prefix: str, created_before: float) -> int:
        before = repr(float(created_before))
        replies = await self._each(self._all(), lambda _: ("remove_created_before", group_prefix, before))
        return sum(int(n) for n in replies)

    async def trim_group(self, group: str, max_bytes: int) -> int:
        if not self.clustered:
            return int(await self._call(0, "trim_group", group, max_bytes))
        return await self._evict(("1", group), None, max_bytes)

    async def usage(self, group: str | None = None) -> Usage:
        """Items and bytes held, in one group or the whole namespace, as the store's index counts them.

        Before counting, the index (of the group, or of the namespace) is walked in batches and every
        entry whose item Redis evicted on its own is dropped, so the count is of items that were held
        during the walk. The walk is O(items) round trips of 512 entries. The first count of a namespace,
        and the first after Redis evicted its directory (only an `allkeys-*` policy can), also scan the
        Redis database's keys (`SCAN`, 500 a step) and index again the items held without an entry. On a
        cluster every shard is counted so (all at once) and the counts summed.
        """
        counts = await _gather(self._shard_usage(shard, group) for shard in self._all())
        return Usage(items=sum(c.items for c in counts), bytes=sum(c.bytes for c in counts))

    async def _shard_usage(self, shard: int, group: str | None) -> Usage:
        for _ in range(_WHOLE_ATTEMPTS):
            token = text(await self._call(shard, "whole", uuid.uuid4().hex))
            if not token:
                break
            # The directory is not known to hold every item: a new namespace, or Redis evicted it. Every
            # item is looked at, one short script per step; the directory's mark, still there at the end,
            # shows it was not evicted meanwhile.
            cursor: bytes | int = b"0"
            while True:
                cursor = await self._call(shard, "adopt", cursor, _SCAN_COUNT)
                if cursor in (b"0", 0):
                    break
            if await self._call(shard, "found", token):
                break
        at = 0
        while at >= 0:
            at = int(await self._call(shard, "sweep", "lru" if group is None else "g:" + group, at, 512))
        counts = await self._call(shard, "usage") if group is None else await self._call(shard, "usage", group)
        items, held = (int(value or 0) for value in counts)
        return Usage(items=items, bytes=held)

    async def list_page(self, match: Match, cursor: str | None = None, limit: int = DEFAULT_PAGE_SIZE) -> Page:
        # The cursor is the directory's HSCAN cursor (on a cluster, with its shard's number): a page is what
        # one scan step met, so it may hold fewer entries than `limit` (even none) before the end.
        if self.clustered:
            shard, scan = parse_cluster_cursor(cursor, len(self._prefixes))
        else:
            shard, scan = 0, scan_cursor(cursor)
        next_scan, found = await self._call(shard, "list", *matching(match), scan, limit)
        entries: list[Listed] = []
        for at in range(0, len(found), 2):
            key, fields = found[at], found[at + 1]
            # The load's field order, with an empty body in its place (not read, so not verified), and the size.
            item, _ = decode_fields([fields[0], b"", *fields[1:10]], verify=False)
            if item is None or not isinstance(key, bytes):
                continue  # a corrupt record is skipped; the next load deletes it
            size = fields[10]
            entries.append(Listed(key.decode(), item, int(size) if size else item.size))
        if next_scan not in (b"0", 0):
            next_cursor: str | None = text(next_scan)
            if self.clustered:
                next_cursor = cluster_cursor(shard, text(next_scan))
        elif self.clustered and shard + 1 < len(self._prefixes):
            next_cursor = cluster_cursor(shard + 1, "0")
        else:
            next_cursor = None
        return Page(tuple(entries), next_cursor)

    async def count(self, match: Match) -> Usage:
        walked = await _gather(self._walk(shard, "count", match) for shard in self._all())
        return Usage(items=sum(n for n, _ in walked), bytes=sum(b for _, b in walked))

    async def remove_matching(self, match: Match) -> int:
        walked = await _gather(self._walk(shard, "remove_matching", match) for shard in self._all())
        return sum(n for n, _ in walked)

    async def _walk(self, shard: int, op: str, match: Match) -> tuple[int, int]:
        """A whole walk of one shard's directory counting or removing what `match` covers: (items, bytes)."""
        items = held = 0
        cursor = "0"
        while True:
            next_cursor, found, size = await self._call(shard, op, *matching(match), cursor, _SCAN_COUNT)
            items, held = items + int(found), held + int(size)
            if next_cursor in (b"0", 0):
                return items, held
            cursor = text(next_cursor)

    async def remove_all(self) -> None:
        # Not one script: a namespace can be large, and a SCAN never blocks the server for long. An item
        # saved concurrently may lose its index entries; it is cleaned up when next met. On a cluster every
        # primary is scanned (each shard's keys live on the one serving its slot) for the namespace's tags;
        # the pattern also meets namespaces whose name starts as this one does, filtered out below.
        for circuit in self._circuits:
            self._check_circuit(circuit)
        pattern = glob_escape("{" + self.namespace + ("/" if self.clustered else "}:")) + "*"
        mine = {prefix.encode() for prefix in self._prefixes}
        names = aiter(self._client.scan_iter(match=pattern, count=1000))
        batch: dict[bytes, list[bytes]] = {}
        while True:
            name = await self._bounded(None, anext(names, None))
            if name is not None:
                tag_end = name.find(b"}:")
                if tag_end > 0 and name[: tag_end + 2] in mine:
                    batch.setdefault(name[: tag_end + 2], []).append(name)
            if name is None or sum(len(names_) for names_ in batch.values()) >= 1000:
                for doomed in batch.values():  # one shard's names: one slot, one command
                    await self._bounded(None, self._client.unlink(*doomed))
                batch = {}
            if name is None:
                return

    async def __aenter__(self) -> RedisStore:
        return self

    async def close(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def _all(self) -> list[int]:
        return list(range(len(self._prefixes)))

    def _bounds(self) -> tuple[int | str, int | str]:
        return (
            "" if self.limits.max_bytes is None else self.limits.max_bytes,
            "" if self.limits.max_items is None else self.limits.max_items,
        )

    async def _make_room(self) -> None:
        """On a cluster, evicts across shards until the namespace fits its bounds (one Redis: the script did)."""
        if self.clustered and (self.limits.max_bytes is not None or self.limits.max_items is not None):
            await self._evict(("0", ""), self.limits.max_items, self.limits.max_bytes)

    async def _evict(self, order: tuple[str, str], max_items: int | None, max_bytes: int | None) -> int:
        """Drops the least recently used items of the namespace (`order` ("0", "")) or of a group (("1", name))
        across every shard until they fit the bounds; how many it dropped. Each round asks every shard for its
        counts and oldest items, drops those `choose_evictions` picks (each only if unused since), and ends
        when nothing needs to go, or when rounds keep dropping nothing (every pick used meanwhile)."""
        evicted = stalls = 0
        while stalls < _EVICTION_STALLS:
            replies = await self._each(self._all(), lambda _: ("oldest", *order, _EVICTION_LOOK))
            oldest = [
                (
                    int(reply[0]),
                    int(reply[1]),
                    [
                        Candidate(float(reply[at + 1]), shard, text(reply[at]), int(reply[at + 2]))
                        for at in range(2, len(reply), 3)
                    ],
                )
                for shard, reply in enumerate(replies)
            ]
            chosen = choose_evictions(oldest, _EVICTION_LOOK, max_items, max_bytes)
            if not chosen:
                return evicted
            by_shard: dict[int, list[str]] = {}
            for candidate in chosen:
                by_shard.setdefault(candidate.shard, []).extend((candidate.key, repr(candidate.score)))
            replies = await self._each(list(by_shard), lambda shard, picked=by_shard: ("evict", *order, *picked[shard]))
            dropped = sum(int(n) for n in replies)
            evicted += dropped
            stalls = 0 if dropped else stalls + 1
        return evicted

    def _check_circuit(self, circuit: Circuit) -> None:
        left = circuit.left_s()
        if left > 0:
            raise RedisUnavailable(
                f"Redis did not answer within {self.socket_timeout_s:g} s; not asked again for {left:.1f} s "
                f"(cooldown_s={self.cooldown_s:g})"
            )

    def _trip(self, circuits: Iterable[Circuit], waited_s: float) -> None:
        for circuit in circuits:
            circuit.trip()
        # INFO: the operation raises, and whoever called it says so (a store fence: one line per outage).
        logger.info(
            "Redis namespace %r: no answer within %g s; failing fast for %g s",
            self.namespace,
            waited_s,
            self.cooldown_s,
        )

    async def _idle(self) -> str:
        """The idle expiry in ms for the scripts ('' for none), reading the server's policy when "auto"."""
        if self.idle_ttl_s != AUTO:
            return self._idle_arg
        now = time.monotonic()
        if self._policy_read_at is None or now - self._policy_read_at >= POLICY_RECHECK_S:
            info = await self._client.info("memory")
            policy = info.get("maxmemory_policy", b"")
            policy = policy.decode() if isinstance(policy, bytes) else str(policy)
            self._idle_arg = str(math.ceil(AUTO_IDLE_TTL_S * 1000)) if policy.startswith("volatile") else ""
            self._policy_read_at = now
        return self._idle_arg

    async def _call(self, shard: int, op: str, *args: bytes | str | int, moving: int = 0) -> Any:
        """One script run on one shard, bounded by the socket timeout and the time `moving` bytes of body are
        allowed (the policy read that may come first is a command of its own, bounded by its own timeout)."""
        self._check_circuit(self._circuits[shard])
        if isinstance(self._client, AsyncRedisCluster):
            await self._discovered(shard)
        idle = await self._bounded(shard, self._idle())
        prefix = self._prefixes[shard]
        run = self._script(keys=[prefix + "u"], args=[prefix, op, idle, self._alone, *args])
        return await self._bounded(shard, run, moving)

    async def _discovered(self, shard: int) -> None:
        """A cluster client learns the cluster's nodes, slots and commands on its first use (a few round
        trips, one of them the command table): within a budget of its own, a few connection timeouts, not
        within the first operation's."""
        assert isinstance(self._client, AsyncRedisCluster)
        budget = 4 * self.connect_timeout_s + self.socket_timeout_s
        try:
            with anyio.fail_after(budget):
                await self._client.initialize()
        except (TimeoutError, redis.exceptions.TimeoutError):
            self._trip([self._circuits[shard]], budget)
            raise redis.exceptions.TimeoutError(
                f"the Redis Cluster's nodes did not answer within {budget:g} s"
            ) from None

    async def prepare(self) -> None:
        """On a cluster, learn its nodes and slots now (see `Store.prepare`); on one Redis, nothing."""
        if not isinstance(self._client, AsyncRedisCluster):
            return
        try:
            await self._discovered(0)
        except Exception as exc:  # best effort: the first operation tries again
            logger.warning("Redis namespace %r: the cluster could not be reached yet: %s", self.namespace, exc)

    async def _each(self, shards: Sequence[int], args: Any) -> list[Any]:
        """`_call(shard, *args(shard))` on each of `shards`, all at once; the replies in the same order."""
        return await _gather(self._call(shard, *args(shard)) for shard in shards)

    async def _bounded(self, shard: int | None, step: Awaitable[T], moving: int = 0) -> T:
        """`step` within the store's timeout for `moving` bytes; a step that overruns it trips the circuit of
        its shard (of every shard for None). Cancelled mid-command, the client drops that connection (the
        reply could arrive on it later)."""
        timeout = transfer_budget_s(self.socket_timeout_s, self.seconds_per_mb, moving, _MOST_BODY_BYTES)
        try:
            with anyio.fail_after(timeout):
                return await step
        except (TimeoutError, redis.exceptions.TimeoutError):
            self._trip(self._circuits if shard is None else [self._circuits[shard]], timeout)
            raise redis.exceptions.TimeoutError(f"Redis did not answer within {timeout:g} s") from None


async def _gather(steps: Iterable[Awaitable[T]]) -> list[T]:
    """Every step's result in order, run at once; the first failure cancels the rest and is raised."""
    pending = list(steps)
    if len(pending) == 1:
        return [await pending[0]]
    results: list[Any] = [None] * len(pending)

    async def run(at: int, step: Awaitable[T]) -> None:
        results[at] = await step

    try:
        async with anyio.create_task_group() as tasks:
            for at, step in enumerate(pending):
                tasks.start_soon(run, at, step)
    except* Exception as group:
        # The first failure as itself (a Redis error, a timeout), as one script's would be, not as a group.
        raise group.exceptions[0] from None
    return results


def _open_client(url: str, connect_timeout_s: float) -> RedisClient:
    """The client a URL names: one Redis, or a Redis Cluster (ValueError for a URL that is neither)."""
    # Neither client has a socket timeout: every operation is bounded by the store itself (`_bounded`), by
    # its size. A command is retried once, at once, when its connection failed.
    retry = Retry(NoBackoff(), retries=1, supported_errors=(redis.exceptions.ConnectionError,))
    if redis_url_kind(url) == "single":
        return redis.asyncio.Redis.from_url(
            url, socket_timeout=None, socket_connect_timeout=connect_timeout_s, retry=retry
        )
    parsed = parse_cluster_url(url)
    return AsyncRedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in parsed.nodes],
        ssl=parsed.ssl,
        username=parsed.username,
        password=parsed.password,
        socket_timeout=None,
        socket_connect_timeout=connect_timeout_s,
        # A failover leaves some slots unserved for a while: the client still starts, and those shards fail
        # (a miss) until a replica takes over, which the client learns on its next attempt.
        require_full_coverage=False,
        retry=Retry(NoBackoff(), retries=2, supported_errors=(redis.exceptions.ConnectionError,)),
    )


def _decodes(client: RedisClient) -> bool:
    if isinstance(client, AsyncRedisCluster):
        return bool(client.get_encoder().decode_responses)
    return bool(client.connection_pool.connection_kwargs.get("decode_responses"))
