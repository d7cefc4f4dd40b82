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
                x expiry, t tag (absent for None), s stamp, k checksum, v save version (a `tick`)
- `d`           hash key -> "<size> <group>": the directory, enough to unindex an item whose hash is gone
- `lru`         sorted set key -> use tick, the whole namespace (for the optional global bound)
- `g:<group>`   sorted set key -> use tick (group LRU order, trim_group, remove_group)
- `c:<group>`   sorted set key -> created_at (remove_created_before)
- `groups`      sorted set of group names, all scored 0 so they sort by name (group prefixes)
- `x`           sorted set key -> expiry in ms: index entries of items Redis already expired are dropped
                at the start of the next operation, judged by the Redis server's own clock
- `u`           hash of item and byte counts, per group and in total
- `tick`        the use counter: strictly ordered even for uses within one millisecond

Every key starts with `{<namespace>}:`; the hash tag puts a namespace in one cluster slot, which the
scripts need since they derive key names from the data. An item that vanished without the scripts
knowing (a maxmemory eviction) keeps its index entries until an operation meets it, and is then cleaned
up without being counted.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from mcpcache.stores.base import (
    Item,
    Store,
    StoreLimits,
    Usage,
    body_checksum,
    check_stamp,
    decode_meta,
    encode_meta,
)

logger = logging.getLogger("mcpcache.stores.redis")

_SCRIPT = r"""
local P = ARGV[1]
local op = ARGV[2]
local U, D, LRU, X, GROUPS, TICK = P .. 'u', P .. 'd', P .. 'lru', P .. 'x', P .. 'groups', P .. 'tick'
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function num(v) return tonumber(v or '0') or 0 end

local function unindex(k)
  local d = redis.call('HGET', D, k)
  if not d then return end
  local sp = string.find(d, ' ', 1, true)
  local size = tonumber(string.sub(d, 1, sp - 1))
  local g = string.sub(d, sp + 1)
  redis.call('HDEL', D, k)
  redis.call('ZREM', LRU, k)
  redis.call('ZREM', X, k)
  redis.call('ZREM', P .. 'g:' .. g, k)
  redis.call('ZREM', P .. 'c:' .. g, k)
  redis.call('HINCRBY', U, 'n', -1)
  redis.call('HINCRBY', U, 'b', -size)
  if redis.call('HINCRBY', U, 'n:' .. g, -1) <= 0 then
    redis.call('HDEL', U, 'n:' .. g, 'b:' .. g)
    redis.call('ZREM', GROUPS, g)
  else
    redis.call('HINCRBY', U, 'b:' .. g, -size)
  end
end

-- Drops an item and its index entries; 1 when the item itself was still there.
local function drop(k)
  unindex(k)
  return redis.call('DEL', P .. 'i:' .. k)
end

local function touch(k, g)
  local tick = redis.call('INCR', TICK)
  redis.call('ZADD', LRU, tick, k)
  redis.call('ZADD', P .. 'g:' .. g, tick, k)
end

local function index(k, g, size, created, exp)
  redis.call('HSET', D, k, size .. ' ' .. g)
  touch(k, g)
  redis.call('ZADD', P .. 'c:' .. g, created, k)
  if exp ~= '' then redis.call('ZADD', X, exp, k) end
  redis.call('ZADD', GROUPS, 0, g)
  redis.call('HINCRBY', U, 'n', 1)
  redis.call('HINCRBY', U, 'b', size)
  redis.call('HINCRBY', U, 'n:' .. g, 1)
  redis.call('HINCRBY', U, 'b:' .. g, size)
end

local function purge_expired()
  while true do
    local ks = redis.call('ZRANGEBYSCORE', X, '-inf', now_ms, 'LIMIT', 0, 128)
    if #ks == 0 then return end
    for _, k in ipairs(ks) do drop(k) end
  end
end

-- Evicts least-recently-used items until `size` more bytes and `count` more items fit the bounds.
local function make_room(size, count, max_b, max_n)
  local evicted = 0
  while true do
    local n, b = num(redis.call('HGET', U, 'n')), num(redis.call('HGET', U, 'b'))
    if not ((max_b and b + size > max_b) or (max_n and n + count > max_n)) then return evicted end
    local oldest = redis.call('ZRANGE', LRU, 0, 0)
    if #oldest == 0 then return evicted end
    evicted = evicted + drop(oldest[1])
  end
end

local function expire(ik, exp)
  if exp == '' then redis.call('PERSIST', ik) else redis.call('PEXPIREAT', ik, exp) end
end

-- The stamp of the live item under k, or nil when there is none (or its stamp is not a number).
local function live_stamp(k)
  local ik = P .. 'i:' .. k
  if redis.call('TYPE', ik)['ok'] ~= 'hash' or redis.call('HEXISTS', D, k) == 0 then return nil end
  return tonumber(redis.call('HGET', ik, 's') or '')
end

purge_expired()

if op == 'load' then
  local k = ARGV[3]
  local ik = P .. 'i:' .. k
  local kind = redis.call('TYPE', ik)['ok']
  local d = redis.call('HGET', D, k)
  if kind ~= 'hash' or not d then
    if kind ~= 'none' or d then drop(k) end
    return false
  end
  touch(k, string.sub(d, string.find(d, ' ', 1, true) + 1))
  return redis.call('HMGET', ik, 'm', 'b', 'g', 'c', 'x', 't', 's', 'k', 'v')

elseif op == 'save' then
  local k, meta, body, g, created, exp, exp_raw = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
  local size, max_b, max_n = ARGV[10], tonumber(ARGV[11]), tonumber(ARGV[12])
  local has_tag, tag, stamp, sum = ARGV[13], ARGV[14], ARGV[15], ARGV[16]
  local held = live_stamp(k)
  if held and held > tonumber(stamp) then return 0 end
  drop(k)
  if exp ~= '' and tonumber(exp) <= now_ms then return 0 end
  if max_b and tonumber(size) > max_b then return 0 end
  make_room(tonumber(size), 1, max_b, max_n)
  local ik = P .. 'i:' .. k
  local version = redis.call('INCR', TICK)
  redis.call('HSET', ik, 'm', meta, 'b', body, 'g', g, 'c', created, 'x', exp_raw, 's', stamp, 'k', sum, 'v', version)
  if has_tag == '1' then redis.call('HSET', ik, 't', tag) end
  expire(ik, exp)
  index(k, g, size, created, exp)
  return 1

elseif op == 'update_meta' then
  local k, meta, exp, exp_raw = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
  local max_b, max_n = tonumber(ARGV[7]), tonumber(ARGV[8])
  local has_tag, tag, stamp = ARGV[9], ARGV[10], ARGV[11]
  local ik = P .. 'i:' .. k
  local d = redis.call('HGET', D, k)
  if redis.call('TYPE', ik)['ok'] ~= 'hash' or not d then
    drop(k)
    return 0
  end
  if has_tag == '1' and redis.call('HGET', ik, 't') ~= tag then return 0 end
  if stamp ~= '' then
    local held = tonumber(redis.call('HGET', ik, 's') or '')
    if held and held > tonumber(stamp) then return 0 end
  end
  local size = redis.call('HSTRLEN', ik, 'b') + string.len(meta)
  if (exp ~= '' and tonumber(exp) <= now_ms) or (max_b and size > max_b) then
    drop(k)
    return 1
  end
  local g = string.sub(d, string.find(d, ' ', 1, true) + 1)
  local created = redis.call('ZSCORE', P .. 'c:' .. g, k) or '0'
  unindex(k)
  redis.call('HSET', ik, 'm', meta, 'x', exp_raw)
  if stamp ~= '' then redis.call('HSET', ik, 's', stamp) end
  expire(ik, exp)
  make_room(size, 1, max_b, max_n)
  index(k, g, size, created, exp)
  return 1

elseif op == 'remove' then
  return drop(ARGV[3])

elseif op == 'drop_corrupt' then
  -- Drops the record only if it is still the save that was read (same version): a replacement stays.
  local k, version = ARGV[3], ARGV[4]
  local ik = P .. 'i:' .. k
  if redis.call('TYPE', ik)['ok'] == 'hash' and (redis.call('HGET', ik, 'v') or '') ~= version then return 0 end
  return drop(k)

elseif op == 'remove_group' then
  local n = 0
  for _, k in ipairs(redis.call('ZRANGE', P .. 'g:' .. ARGV[3], 0, -1)) do n = n + drop(k) end
  return n

elseif op == 'remove_created_before' then
  local prefix, before = ARGV[3], ARGV[4]
  local n, from = 0, '[' .. prefix
  while true do
    local groups = redis.call('ZRANGEBYLEX', GROUPS, from, '+', 'LIMIT', 0, 128)
    if #groups == 0 then return n end
    for _, g in ipairs(groups) do
      if string.sub(g, 1, #prefix) ~= prefix then return n end
      for _, k in ipairs(redis.call('ZRANGEBYSCORE', P .. 'c:' .. g, '-inf', '(' .. before)) do n = n + drop(k) end
    end
    from = '(' .. groups[#groups]
  end

elseif op == 'trim_group' then
  local g, max_b = ARGV[3], tonumber(ARGV[4])
  local n = 0
  while num(redis.call('HGET', U, 'b:' .. g)) > max_b do
    local oldest = redis.call('ZRANGE', P .. 'g:' .. g, 0, 0)
    if #oldest == 0 then break end
    n = n + drop(oldest[1])
  end
  return n

elseif op == 'usage' then
  local g = ARGV[3]
  if g == nil then return redis.call('HMGET', U, 'n', 'b') end
  return redis.call('HMGET', U, 'n:' .. g, 'b:' .. g)
end
return redis.error_reply('mcpcache: unknown store operation ' .. tostring(op))
"""


class RedisStore(Store):
    """A store in Redis, shared by every process that names the same server and namespace.

    Pass a URL (the store then owns its client: it fails fast when Redis is down, with one quick retry,
    because a cache that stalls is worse than a miss) or a `redis.asyncio.Redis` client of your own, which
    must not decode responses and which `close()` leaves open. `limits` is optional: Redis's own
    `maxmemory` policy may bound it instead; `trim_group` works either way.
    """

    def __init__(
        self,
        url_or_client: str | redis.asyncio.Redis,
        *,
        namespace: str = "mcpcache",
        limits: StoreLimits | None = None,
    ) -> None:
        if not namespace or "{" in namespace or "}" in namespace:
            raise ValueError(f"namespace must be non-empty and free of braces, got {namespace!r}")
        if isinstance(url_or_client, str):
            self._client = redis.asyncio.Redis.from_url(
                url_or_client,
                retry=Retry(ExponentialBackoff(cap=0.1, base=0.01), retries=1),
                socket_connect_timeout=2.0,
            )
            self._owns_client = True
        else:
            if url_or_client.connection_pool.connection_kwargs.get("decode_responses"):
                raise ValueError("RedisStore needs a client with decode_responses=False: bodies are bytes")
            self._client = url_or_client
            self._owns_client = False
        self.namespace = namespace
        self.limits = limits if limits is not None else StoreLimits()
        self._prefix = "{" + namespace + "}:"
        self._script = self._client.register_script(_SCRIPT)

    @property
    def client(self) -> redis.asyncio.Redis:
        return self._client

    def item_key(self, key: str) -> str:
        """The Redis key holding one item's hash (for tools and tests that look underneath)."""
        return self._prefix + "i:" + key

    async def load(self, key: str) -> Item | None:
        fields = await self._call("load", key)
        if fields is None:
            return None
        item, fault = _decode_fields(fields)
        if item is None:
            logger.warning("Redis namespace %r: dropping a corrupt record under key %r: %s", self.namespace, key, fault)
            version = fields[8] if len(fields) == 9 and isinstance(fields[8], bytes) else b""
            await self._call("drop_corrupt", key, version)
        return item

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
            *_expiry(item.expires_at),
            len(meta) + len(item.body),
            *self._bounds(),
            *_tag(item.tag),
            repr(stamp),
            body_checksum(item.body),
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
            "update_meta", key, encode_meta(meta), *_expiry(expires_at), *self._bounds(), *_tag(if_tag), new_stamp
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
        counts = await self._call("usage") if group is None else await self._call("usage", group)
        items, held = (int(value or 0) for value in counts)
        return Usage(items=items, bytes=held)

    async def remove_all(self) -> None:
        # Not one script: a namespace can be large, and a SCAN never blocks the server for long. An item
        # saved concurrently may lose its index entries; it is cleaned up when next met.
        pattern = _glob_escape(self._prefix) + "*"
        batch: list[bytes] = []
        async for name in self._client.scan_iter(match=pattern, count=1000):
            batch.append(name)
            if len(batch) >= 1000:
                await self._client.unlink(*batch)
                batch.clear()
        if batch:
            await self._client.unlink(*batch)

    async def close(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def _bounds(self) -> tuple[int | str, int | str]:
        return (
            "" if self.limits.max_bytes is None else self.limits.max_bytes,
            "" if self.limits.max_items is None else self.limits.max_items,
        )

    async def _call(self, op: str, *args: bytes | str | int) -> Any:
        return await self._script(keys=[self._prefix + "u"], args=[self._prefix, op, *args])


def _expiry(expires_at: float | None) -> tuple[str, str]:
    """The expiry in whole milliseconds for Redis, and exactly as given for the item's hash."""
    if expires_at is None:
        return "", ""
    return str(math.ceil(expires_at * 1000)), repr(float(expires_at))


def _tag(tag: str | None) -> tuple[str, str]:
    """A tag for the script: whether there is one, and its text (None and "" are different tags)."""
    return ("0", "") if tag is None else ("1", tag)


def _decode_fields(fields: Sequence[object]) -> tuple[Item | None, str]:
    """The item from its hash fields, or None and what is wrong: a field missing or malformed, or a body
    that does not match its checksum (a record written before checksums were kept has none)."""
    if len(fields) != 9:
        return None, "unexpected fields"
    raw_meta, body, group, created, expiry, tag, stamp, checksum, _ = fields
    if not (
        isinstance(raw_meta, bytes)
        and isinstance(group, bytes)
        and isinstance(created, bytes)
        and isinstance(expiry, bytes)
        and isinstance(stamp, bytes)
        and (tag is None or isinstance(tag, bytes))
    ):
        return None, "a field is missing"
    if not isinstance(body, bytes):
        return None, "the body is missing"
    if not isinstance(checksum, bytes):
        return None, "the checksum is missing"
    meta = decode_meta(raw_meta)
    try:
        group_name = group.decode()
        tag_text = None if tag is None else tag.decode()
        created_at = float(created)
        expires_at = float(expiry) if expiry else None
        stamp_value = float(stamp)
        checksum_text = checksum.decode()
    except ValueError:  # UnicodeDecodeError is a ValueError too
        return None, "a field is malformed"
    if meta is None:
        return None, "the metadata is not a JSON object"
    if not (math.isfinite(created_at) and math.isfinite(stamp_value)) or (
        expires_at is not None and math.isnan(expires_at)
    ):
        return None, "a time is not a number"
    if body_checksum(body) != checksum_text:
        return None, "the body does not match its checksum"
    item = Item(meta, body, group_name, created_at, expires_at, tag_text, stamp_value, checksum_text)
    return item, ""


def _glob_escape(text: str) -> str:
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)
