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

Every key starts with `{<namespace>}:`; the hash tag puts a namespace in one cluster slot, which the
scripts need since they derive key names from the data.

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
from collections.abc import Awaitable, Mapping, Sequence
from importlib import resources
from typing import Any, Literal, TypeVar

import anyio

from mcpcache.extras import needs

with needs("redis", "the Redis store"):
    import redis.asyncio
    import redis.exceptions
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

from mcpcache.stores.base import (
    DEFAULT_PAGE_SIZE,
    DEFAULT_SECONDS_PER_MB,
    Item,
    Listed,
    Match,
    Page,
    Store,
    StoreLimits,
    Usage,
    body_checksum,
    check_stamp,
    encode_meta,
    transfer_budget_s,
)
from mcpcache.stores.circuit import Circuit
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


class RedisStore(Store):
    """A store in Redis, shared by every process that names the same server and namespace.

    Pass a URL (the store then owns its client) or a `redis.asyncio.Redis` client of your own, which must
    not decode responses and which `close()` leaves open. `limits` is optional: Redis's own `maxmemory`
    may bound it instead; `trim_group` works either way.

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
      circuit also guards a caller's client, whose own timeouts decide when it trips.

    Every key the store writes may be evicted by Redis's `maxmemory` policy without breaking it (see the
    module docstring). With a `volatile-*` policy Redis evicts only keys with an expiry, so items saved
    without one get an idle expiry: `idle_ttl_s` past their last use. The default, "auto", gives them
    `AUTO_IDLE_TTL_S` (30 days) while the server's policy is `volatile-*` (read with INFO, at most once a
    minute) and none otherwise; a number always applies it, None never does.
    """

    def __init__(
        self,
        url_or_client: str | redis.asyncio.Redis,
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
        if isinstance(url_or_client, str):
            self._client = redis.asyncio.Redis.from_url(
                url_or_client,
                # None: every operation is bounded by the store itself (`_bounded`), by its size.
                socket_timeout=None,
                socket_connect_timeout=connect_timeout_s,
                retry=Retry(NoBackoff(), retries=1, supported_errors=(redis.exceptions.ConnectionError,)),
            )
            self._owns_client = True
        else:
            if url_or_client.connection_pool.connection_kwargs.get("decode_responses"):
                raise ValueError("RedisStore needs a client with decode_responses=False: bodies are bytes")
            self._client = url_or_client
            self._owns_client = False
        self.namespace = namespace
        self.limits = limits if limits is not None else StoreLimits()
        self.socket_timeout_s = float(socket_timeout_s)
        self.seconds_per_mb = float(seconds_per_mb)
        self.cooldown_s = float(cooldown_s)
        self.idle_ttl_s = idle_ttl_s
        self._prefix = "{" + namespace + "}:"
        self._script = self._client.register_script(_SCRIPT)
        self._circuit = Circuit(self.cooldown_s)
        self._idle_arg = "" if idle_ttl_s is None or idle_ttl_s == AUTO else str(math.ceil(float(idle_ttl_s) * 1000))
        self._policy_read_at: float | None = None

    @property
    def circuit_open(self) -> bool:
        """Whether the store is refusing operations after a timeout (see `cooldown_s`)."""
        return self._circuit.is_open

    @property
    def client(self) -> redis.asyncio.Redis:
        return self._client

    def item_key(self, key: str) -> str:
        """The Redis key holding one item's hash (for tools and tests that look underneath)."""
        return self._prefix + "i:" + key

    async def load(self, key: str) -> Item | None:
        fields = await self._call("load", key, _INLINE_BODY_BYTES, moving=_INLINE_BODY_BYTES)
        if isinstance(fields, list) and len(fields) == 1:
            # Too large to come along: asked for again, with a timeout for the length Redis holds.
            fields = await self._call("load", key, "", moving=int(fields[0]))
        if fields is None:
            return None
        item, fault = decode_fields(fields)
        if item is None:
            logger.warning("Redis namespace %r: dropping a corrupt record under key %r: %s", self.namespace, key, fault)
            await self._call("drop_corrupt", key, version(fields))
        return item

    async def peek_many(self, keys: Sequence[str]) -> list[Item | None]:
        if not keys:
            return []
        replies = await self._call("peek", *keys)
        items: list[Item | None] = []
        for key, fields in zip(keys, replies, strict=True):
            if not fields:
                items.append(None)
                continue
            # The load's field order, with an empty body in its place (not read, so not verified).
            item, fault = decode_fields([fields[0], b"", *fields[1:]], verify=False)
            if item is None:
                logger.warning(
                    "Redis namespace %r: dropping a corrupt record under key %r: %s", self.namespace, key, fault
                )
                await self._call("drop_corrupt", key, version(fields))
            items.append(item)
        return items

    async def save(self, key: str, item: Item) -> bool:
        stamp = check_stamp(item.stamp)
        meta = encode_meta(item.meta)
        stored = await self._call(
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
            "update_meta", key, encode_meta(meta), *expiry(expires_at), *self._bounds(), *tag(if_tag), new_stamp
        )
        return bool(updated)

    async def remove(self, key: str) -> None:
        await self._call("remove", key)

    async def remove_group(self, group: str) -> int:
        return int(await self._call("remove_group", group))

    async def remove_created_before(self, group_prefix: str, created_before: float) -> int:
        return int(await self._call("remove_created_before", group_prefix, repr(float(created_before))))

    async def trim_group(self, group: str, max_bytes: int) -> int:
        return int(await self._call("trim_group", group, max_bytes))

    async def usage(self, group: str | None = None) -> Usage:
        """Items and bytes held, in one group or the whole namespace, as the store's index counts them.

        Before counting, the index (of the group, or of the namespace) is walked in batches and every
        entry whose item Redis evicted on its own is dropped, so the count is of items that were held
        during the walk. The walk is O(items) round trips of 512 entries. The first count of a namespace,
        and the first after Redis evicted its directory (only an `allkeys-*` policy can), also scan the
        Redis database's keys (`SCAN`, 500 a step) and index again the items held without an entry.
        """
        for _ in range(_WHOLE_ATTEMPTS):
            token = text(await self._call("whole", uuid.uuid4().hex))
            if not token:
                break
            # The directory is not known to hold every item: a new namespace, or Redis evicted it. Every
            # item is looked at, one short script per step; the directory's mark, still there at the end,
            # shows it was not evicted meanwhile.
            cursor: bytes | int = b"0"
            while True:
                cursor = await self._call("adopt", cursor, _SCAN_COUNT)
                if cursor in (b"0", 0):
                    break
            if await self._call("found", token):
                break
        at = 0
        while at >= 0:
            at = int(await self._call("sweep", "lru" if group is None else "g:" + group, at, 512))
        counts = await self._call("usage") if group is None else await self._call("usage", group)
        items, held = (int(value or 0) for value in counts)
        return Usage(items=items, bytes=held)

    async def list_page(self, match: Match, cursor: str | None = None, limit: int = DEFAULT_PAGE_SIZE) -> Page:
        # The cursor is the directory's HSCAN cursor: a page is what one scan step met, so it may hold fewer
        # entries than `limit` (even none) before the end.
        reply = await self._call("list", *matching(match), scan_cursor(cursor), limit)
        next_cursor, found = reply
        entries: list[Listed] = []
        for at in range(0, len(found), 2):
            key, fields = found[at], found[at + 1]
            # The load's field order, with an empty body in its place (not read, so not verified), and the size.
            item, _ = decode_fields([fields[0], b"", *fields[1:10]], verify=False)
            if item is None or not isinstance(key, bytes):
                continue  # a corrupt record is skipped; the next load deletes it
            size = fields[10]
            entries.append(Listed(key.decode(), item, int(size) if size else item.size))
        return Page(tuple(entries), None if next_cursor in (b"0", 0) else text(next_cursor))

    async def count(self, match: Match) -> Usage:
        items = held = 0
        cursor = "0"
        while True:
            next_cursor, found, size = await self._call("count", *matching(match), cursor, _SCAN_COUNT)
            items, held = items + int(found), held + int(size)
            if next_cursor in (b"0", 0):
                return Usage(items=items, bytes=held)
            cursor = text(next_cursor)

    async def remove_matching(self, match: Match) -> int:
        removed = 0
        cursor = "0"
        while True:
            next_cursor, dropped, _ = await self._call("remove_matching", *matching(match), cursor, _SCAN_COUNT)
            removed += int(dropped)
            if next_cursor in (b"0", 0):
                return removed
            cursor = text(next_cursor)

    async def remove_all(self) -> None:
        # Not one script: a namespace can be large, and a SCAN never blocks the server for long. An item
        # saved concurrently may lose its index entries; it is cleaned up when next met.
        self._check_circuit()
        pattern = glob_escape(self._prefix) + "*"
        cursor: int = 0
        while True:
            cursor, names = await self._bounded(self._client.scan(cursor=cursor, match=pattern, count=1000))
            if names:
                await self._bounded(self._client.unlink(*names))
            if not cursor:
                return

    async def __aenter__(self) -> RedisStore:
        return self

    async def close(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def _bounds(self) -> tuple[int | str, int | str]:
        return (
            "" if self.limits.max_bytes is None else self.limits.max_bytes,
            "" if self.limits.max_items is None else self.limits.max_items,
        )

    def _check_circuit(self) -> None:
        left = self._circuit.left_s()
        if left > 0:
            raise RedisUnavailable(
                f"Redis did not answer within {self.socket_timeout_s:g} s; not asked again for {left:.1f} s "
                f"(cooldown_s={self.cooldown_s:g})"
            )

    def _trip(self, waited_s: float) -> None:
        self._circuit.trip()
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

    async def _call(self, op: str, *args: bytes | str | int, moving: int = 0) -> Any:
        """One script run, bounded by the socket timeout and the time `moving` bytes of body are allowed (the
        policy read that may come first is a command of its own, bounded by its own timeout)."""
        self._check_circuit()
        idle = await self._bounded(self._idle())
        return await self._bounded(
            self._script(keys=[self._prefix + "u"], args=[self._prefix, op, idle, *args]), moving
        )

    async def _bounded(self, step: Awaitable[T], moving: int = 0) -> T:
        """`step` within the store's timeout for `moving` bytes; a step that overruns it trips the circuit.
        Cancelled mid-command, the client drops that connection (the reply could arrive on it later)."""
        timeout = transfer_budget_s(self.socket_timeout_s, self.seconds_per_mb, moving, _MOST_BODY_BYTES)
        try:
            with anyio.fail_after(timeout):
                return await step
        except (TimeoutError, redis.exceptions.TimeoutError):
            self._trip(timeout)
            raise redis.exceptions.TimeoutError(f"Redis did not answer within {timeout:g} s") from None
