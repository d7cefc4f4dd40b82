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
                and counted, exactly when it has an entry here)
- `lru`         sorted set key -> use tick, the whole namespace (for the optional global bound)
- `g:<group>`   sorted set key -> use tick (group LRU order, trim_group, remove_group)
- `c:<group>`   sorted set key -> created_at (remove_created_before)
- `groups`      sorted set of group names, all scored 0 so they sort by name (group prefixes)
- `x`           sorted set key -> expiry in ms: index entries of items Redis already expired are dropped
                at the start of the next operation, judged by the Redis server's own clock
- `u`           hash of item and byte counts, per group and in total
- `tick`        the use counter: strictly ordered even for uses within one millisecond
- `sweep`       where the next write's sweep of the index starts
- `u` also holds `lost`: how many times Redis evicted the directory since `usage` last indexed every
  item again

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
  Under `allkeys-lru` they are in use on every operation and are the last keys Redis picks.
- With a `volatile-*` policy, items need an expiry to be evictable at all: see `idle_ttl_s`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Mapping, Sequence
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
    decode_meta,
    encode_meta,
    transfer_budget_s,
)

logger = logging.getLogger("mcpcache.stores.redis")

T = TypeVar("T")

_SCRIPT = r"""
local P = ARGV[1]
local op = ARGV[2]
local IDLE = ARGV[3]
local A = {}
for i = 4, #ARGV do A[i - 3] = ARGV[i] end
local U, D, LRU, X, GROUPS = P .. 'u', P .. 'd', P .. 'lru', P .. 'x', P .. 'groups'
local TICK, CUR = P .. 'tick', P .. 'sweep'
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function num(v) return tonumber(v or '0') or 0 end
local function group_of(d) return string.sub(d, string.find(d, ' ', 1, true) + 1) end
local function is_hash(ik) return redis.call('TYPE', ik)['ok'] == 'hash' end

-- The expiry in ms as the script wants it, from the item's own 'x' field ('' for none).
local function exp_of(x)
  if not x or x == '' then return '' end
  local ms = math.ceil(tonumber(x) * 1000)
  return string.format('%d', ms)
end

-- What the item hash says its size is (records saved before 'z' was kept: body plus metadata).
local function item_size(ik)
  local z = redis.call('HGET', ik, 'z')
  if z then return tonumber(z) end
  return redis.call('HSTRLEN', ik, 'b') + redis.call('HSTRLEN', ik, 'm')
end

local function unindex(k)
  local d = redis.call('HGET', D, k)
  if not d then
    -- Not in the directory (never indexed, or the directory was evicted): clear what may linger, count nothing.
    redis.call('ZREM', LRU, k)
    redis.call('ZREM', X, k)
    local ik = P .. 'i:' .. k
    if is_hash(ik) then
      local g = redis.call('HGET', ik, 'g')
      if g then
        redis.call('ZREM', P .. 'g:' .. g, k)
        redis.call('ZREM', P .. 'c:' .. g, k)
      end
    end
    return
  end
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

-- Indexes an item found without a directory entry, from what its own hash says.
local function reindex(k, ik)
  local f = redis.call('HMGET', ik, 'g', 'c', 'x')
  index(k, f[1] or '', item_size(ik), tonumber(f[2] or '') or 0, exp_of(f[3]))
end

-- The derived indexes again from the directory, after Redis evicted one of them (allkeys-* policies).
local function rebuild()
  local lost = redis.call('HGET', U, 'lost')
  local entries = redis.call('HGETALL', D)
  local groups = {}
  for _, g in ipairs(redis.call('ZRANGE', GROUPS, 0, -1)) do groups[g] = true end
  for i = 2, #entries, 2 do groups[group_of(entries[i])] = true end
  for g, _ in pairs(groups) do redis.call('DEL', P .. 'g:' .. g, P .. 'c:' .. g) end
  redis.call('DEL', U, LRU, X, GROUPS, D)
  if lost then redis.call('HSET', U, 'lost', lost) end
  for i = 1, #entries, 2 do
    local ik = P .. 'i:' .. entries[i]
    if is_hash(ik) then reindex(entries[i], ik) end
  end
end

-- Every key here may be evicted by Redis (maxmemory); the directory is the index's authority.
local function check_index()
  if redis.call('EXISTS', D) == 0 then
    -- Redis deletes a hash left empty, so a namespace emptied by its own removals has no directory either;
    -- it counts no items and holds no LRU entries, and is no loss.
    if redis.call('EXISTS', LRU) == 1 or num(redis.call('HGET', U, 'n')) > 0 then
      -- The directory is gone: the rest of the index no longer says anything true. Items still held are
      -- indexed again when next loaded, or by the next `usage`, which the mark below sends looking for them.
      for _, g in ipairs(redis.call('ZRANGE', GROUPS, 0, -1)) do redis.call('DEL', P .. 'g:' .. g, P .. 'c:' .. g) end
      local lost = num(redis.call('HGET', U, 'lost')) + 1
      redis.call('DEL', U, LRU, X, GROUPS)
      -- Kept in `u`, which every operation uses: a key of its own would be the first one Redis evicts.
      redis.call('HSET', U, 'lost', lost)
    end
  elseif redis.call('EXISTS', U) == 0 or redis.call('EXISTS', LRU) == 0 or redis.call('EXISTS', GROUPS) == 0 then
    rebuild()
  end
end

local function check_group(g)
  local n = num(redis.call('HGET', U, 'n:' .. g))
  if redis.call('ZCARD', P .. 'g:' .. g) < n or redis.call('ZCARD', P .. 'c:' .. g) < n then rebuild() end
end

local function purge_expired()
  while true do
    local ks = redis.call('ZRANGEBYSCORE', X, '-inf', now_ms, 'LIMIT', 0, 128)
    if #ks == 0 then return end
    for _, k in ipairs(ks) do drop(k) end
  end
end

local function gone(k) return redis.call('EXISTS', P .. 'i:' .. k) == 0 end

-- Unindexes the entries among ks whose item Redis evicted; returns how many.
local function prune(ks)
  local n = 0
  for _, k in ipairs(ks) do
    if gone(k) then unindex(k); n = n + 1 end
  end
  return n
end

-- Items Redis evicted on its own (maxmemory) leave index entries behind. Each write checks the least
-- recently used entries (where an LRU eviction strikes) while they are stale, and a few more at a cursor
-- that walks the whole index (where any other eviction strikes).
local function sweep()
  for _ = 1, 8 do
    if prune(redis.call('ZRANGE', LRU, 0, 7)) < 8 then break end
  end
  local at = num(redis.call('GET', CUR))
  local ks = redis.call('ZRANGE', LRU, at, at + 7)
  local n = prune(ks)
  if #ks < 8 then at = 0 else at = at + 8 - n end
  redis.call('SET', CUR, at)
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

-- An item without an expiry of its own lives IDLE ms past its last use, when IDLE is set.
local function expire(ik, exp)
  if exp ~= '' then
    redis.call('PEXPIREAT', ik, exp)
  elseif IDLE ~= '' then
    redis.call('PEXPIRE', ik, IDLE)
  else
    redis.call('PERSIST', ik)
  end
end

-- The stamp of the live item under k, or nil when there is none (or its stamp is not a number).
local function live_stamp(k)
  local ik = P .. 'i:' .. k
  if not is_hash(ik) then return nil end
  return tonumber(redis.call('HGET', ik, 's') or '')
end

check_index()
purge_expired()

if op == 'load' then
  local k, most = A[1], tonumber(A[2] or '')
  local ik = P .. 'i:' .. k
  local kind = redis.call('TYPE', ik)['ok']
  local d = redis.call('HGET', D, k)
  if kind ~= 'hash' then
    if kind ~= 'none' or d then drop(k) end
    return false
  end
  -- A body larger than the caller can take within its timeout: only its length, and no use counted (the
  -- caller asks again with a timeout for that length, and that load counts).
  local length = redis.call('HSTRLEN', ik, 'b')
  if most and length > most then return {length} end
  if d then touch(k, group_of(d)) else reindex(k, ik) end
  local fields = redis.call('HMGET', ik, 'm', 'b', 'g', 'c', 'x', 't', 's', 'k', 'sv', 'tl', 'v')
  if fields[5] == '' and IDLE ~= '' then redis.call('PEXPIRE', ik, IDLE) end
  return fields

elseif op == 'peek' then
  -- Every key's fields but the body, in one script: one consistent moment across the keys.
  local out = {}
  for i = 1, #A do
    local k = A[i]
    local ik = P .. 'i:' .. k
    local kind = redis.call('TYPE', ik)['ok']
    local d = redis.call('HGET', D, k)
    if kind ~= 'hash' then
      if kind ~= 'none' or d then drop(k) end
      out[i] = {}
    else
      if d then touch(k, group_of(d)) else reindex(k, ik) end
      local fields = redis.call('HMGET', ik, 'm', 'g', 'c', 'x', 't', 's', 'k', 'sv', 'tl', 'v')
      if fields[4] == '' and IDLE ~= '' then redis.call('PEXPIRE', ik, IDLE) end
      out[i] = fields
    end
  end
  return out

elseif op == 'save' then
  local k, meta, body, g, created, exp, exp_raw = A[1], A[2], A[3], A[4], A[5], A[6], A[7]
  local size, max_b, max_n = A[8], tonumber(A[9]), tonumber(A[10])
  local has_tag, tag, stamp, sum, server, tool = A[11], A[12], A[13], A[14], A[15], A[16]
  local held = live_stamp(k)
  if held and held > tonumber(stamp) then return 0 end
  drop(k)
  sweep()
  if exp ~= '' and tonumber(exp) <= now_ms then return 0 end
  if max_b and tonumber(size) > max_b then return 0 end
  make_room(tonumber(size), 1, max_b, max_n)
  local ik = P .. 'i:' .. k
  local version = redis.call('INCR', TICK)
  redis.call('HSET', ik, 'm', meta, 'b', body, 'g', g, 'c', created, 'x', exp_raw, 's', stamp, 'k', sum, 'v', version,
    'z', size, 'sv', server, 'tl', tool)
  if has_tag == '1' then redis.call('HSET', ik, 't', tag) end
  expire(ik, exp)
  index(k, g, size, created, exp)
  return 1

elseif op == 'update_meta' then
  local k, meta, exp, exp_raw = A[1], A[2], A[3], A[4]
  local max_b, max_n = tonumber(A[5]), tonumber(A[6])
  local has_tag, tag, stamp = A[7], A[8], A[9]
  local ik = P .. 'i:' .. k
  if not is_hash(ik) then
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
  local f = redis.call('HMGET', ik, 'g', 'c')
  unindex(k)
  redis.call('HSET', ik, 'm', meta, 'x', exp_raw, 'z', size)
  if stamp ~= '' then redis.call('HSET', ik, 's', stamp) end
  expire(ik, exp)
  make_room(size, 1, max_b, max_n)
  index(k, f[1] or '', size, tonumber(f[2] or '') or 0, exp)
  return 1

elseif op == 'remove' then
  return drop(A[1])

elseif op == 'drop_corrupt' then
  -- Drops the record only if it is still the save that was read (same version): a replacement stays.
  local k, version = A[1], A[2]
  local ik = P .. 'i:' .. k
  if is_hash(ik) and (redis.call('HGET', ik, 'v') or '') ~= version then return 0 end
  return drop(k)

elseif op == 'remove_group' then
  check_group(A[1])
  local n = 0
  for _, k in ipairs(redis.call('ZRANGE', P .. 'g:' .. A[1], 0, -1)) do n = n + drop(k) end
  return n

elseif op == 'remove_created_before' then
  local prefix, before = A[1], A[2]
  local n, from = 0, '[' .. prefix
  while true do
    local groups = redis.call('ZRANGEBYLEX', GROUPS, from, '+', 'LIMIT', 0, 128)
    if #groups == 0 then return n end
    for _, g in ipairs(groups) do
      if string.sub(g, 1, #prefix) ~= prefix then return n end
      check_group(g)
      for _, k in ipairs(redis.call('ZRANGEBYSCORE', P .. 'c:' .. g, '-inf', '(' .. before)) do n = n + drop(k) end
    end
    from = '(' .. groups[#groups]
  end

elseif op == 'trim_group' then
  local g, max_b = A[1], tonumber(A[2])
  check_group(g)
  local n = 0
  while num(redis.call('HGET', U, 'b:' .. g)) > max_b do
    local oldest = redis.call('ZRANGE', P .. 'g:' .. g, 0, 0)
    if #oldest == 0 then break end
    n = n + drop(oldest[1])
  end
  return n

elseif op == 'sweep' then
  -- One batch of a full walk over an index (the whole namespace, or one group), unindexing every entry
  -- whose item Redis evicted; the rank to continue from, or -1 at the end.
  local z, at, count = P .. A[1], tonumber(A[2]), tonumber(A[3])
  local ks = redis.call('ZRANGE', z, at, at + count - 1)
  local n = prune(ks)
  if #ks < count then return -1 end
  return at + count - n

elseif op == 'list' or op == 'count' or op == 'remove_matching' then
  -- One step of a walk over the directory (HSCAN: every entry present throughout is met at least once),
  -- over the items of group g and, when given, of one server and one tool. Returns the next cursor ('0' at
  -- the end) and, for 'list', key and fields of each match; for 'count', items and bytes; for
  -- 'remove_matching', how many it dropped. Items are read without their bodies and are not touched.
  local g, has_server, server, has_tool, tool, cursor, count = A[1], A[2], A[3], A[4], A[5], A[6], A[7]
  local scanned = redis.call('HSCAN', D, cursor, 'COUNT', count)
  local entries = scanned[2]
  local out, n, bytes = {}, 0, 0
  for i = 1, #entries, 2 do
    local k = entries[i]
    if group_of(entries[i + 1]) == g then
      local ik = P .. 'i:' .. k
      if is_hash(ik) then
        local f = redis.call('HMGET', ik, 'm', 'g', 'c', 'x', 't', 's', 'k', 'sv', 'tl', 'v', 'z')
        if (has_server == '0' or (f[8] or '') == server) and (has_tool == '0' or (f[9] or '') == tool) then
          if op == 'list' then
            out[#out + 1] = k
            out[#out + 1] = f
          elseif op == 'count' then
            n = n + 1
            bytes = bytes + (tonumber(f[11] or '') or item_size(ik))
          else
            n = n + drop(k)
          end
        end
      end
    end
  end
  if op == 'list' then return {scanned[1], out} end
  return {scanned[1], n, bytes}

elseif op == 'adopt' then
  -- One SCAN step over the namespace's items, indexing each one held without a directory entry (after
  -- Redis evicted the directory); the next cursor, '0' at the end.
  local scanned = redis.call('SCAN', A[1], 'MATCH', P .. 'i:*', 'COUNT', tonumber(A[2]))
  for _, ik in ipairs(scanned[2]) do
    local k = string.sub(ik, #P + 3)
    if not redis.call('HGET', D, k) and is_hash(ik) then reindex(k, ik) end
  end
  return scanned[1]

elseif op == 'lost' then
  return redis.call('HGET', U, 'lost') or false

elseif op == 'found' then
  -- Every item held when the directory was lost `A[1]` times is indexed again; a later loss keeps its mark.
  if redis.call('HGET', U, 'lost') == A[1] then redis.call('HDEL', U, 'lost') end
  return true

elseif op == 'usage' then
  local g = A[1]
  if g == nil then return redis.call('HMGET', U, 'n', 'b') end
  return redis.call('HMGET', U, 'n:' .. g, 'b:' .. g)
end
return redis.error_reply('mcpcache: unknown store operation ' .. tostring(op))
"""


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
      (default 5 s, as the tool cache's own circuit), then asks again: a frozen server costs the tool
      cache and `References` (which call the store without a fence) one timeout per cool-down, not one
      per call. This circuit also guards a caller's client, whose own timeouts decide when it trips.

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
        self._open_until = 0.0
        self._idle_arg = "" if idle_ttl_s is None or idle_ttl_s == AUTO else str(math.ceil(float(idle_ttl_s) * 1000))
        self._policy_read_at: float | None = None

    @property
    def circuit_open(self) -> bool:
        """Whether the store is refusing operations after a timeout (see `cooldown_s`)."""
        return time.monotonic() < self._open_until

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
        item, fault = _decode_fields(fields)
        if item is None:
            logger.warning("Redis namespace %r: dropping a corrupt record under key %r: %s", self.namespace, key, fault)
            await self._call("drop_corrupt", key, _version(fields))
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
            item, fault = _decode_fields([fields[0], b"", *fields[1:]], verify=False)
            if item is None:
                logger.warning(
                    "Redis namespace %r: dropping a corrupt record under key %r: %s", self.namespace, key, fault
                )
                await self._call("drop_corrupt", key, _version(fields))
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
            *_expiry(item.expires_at),
            len(meta) + len(item.body),
            *self._bounds(),
            *_tag(item.tag),
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
        """Items and bytes held, in one group or the whole namespace, as the store's index counts them.

        Before counting, the index (of the group, or of the namespace) is walked in batches and every
        entry whose item Redis evicted on its own is dropped, so the count is of items that were held
        during the walk. After Redis evicted the directory itself (only an `allkeys-*` policy can), the
        first count also scans the namespace's items and indexes again those held without an entry. The
        walk is O(items) round trips of 512 entries.
        """
        lost = await self._call("lost")
        if lost:
            # Redis evicted the directory (an `allkeys-*` policy): items held then are counted only once
            # indexed again, so every item is looked at, one short script per step.
            cursor: bytes | int = b"0"
            while True:
                cursor = await self._call("adopt", cursor, _SCAN_COUNT)
                if cursor in (b"0", 0):
                    break
            await self._call("found", lost)
        at = 0
        while at >= 0:
            at = int(await self._call("sweep", "lru" if group is None else "g:" + group, at, 512))
        counts = await self._call("usage") if group is None else await self._call("usage", group)
        items, held = (int(value or 0) for value in counts)
        return Usage(items=items, bytes=held)

    async def list_page(self, match: Match, cursor: str | None = None, limit: int = DEFAULT_PAGE_SIZE) -> Page:
        # The cursor is the directory's HSCAN cursor: a page is what one scan step met, so it may hold fewer
        # entries than `limit` (even none) before the end.
        reply = await self._call("list", *_matching(match), _scan_cursor(cursor), limit)
        next_cursor, found = reply
        entries: list[Listed] = []
        for at in range(0, len(found), 2):
            key, fields = found[at], found[at + 1]
            # The load's field order, with an empty body in its place (not read, so not verified), and the size.
            item, _ = _decode_fields([fields[0], b"", *fields[1:10]], verify=False)
            if item is None or not isinstance(key, bytes):
                continue  # a corrupt record is skipped; the next load deletes it
            size = fields[10]
            entries.append(Listed(key.decode(), item, int(size) if size else item.size))
        return Page(tuple(entries), None if next_cursor in (b"0", 0) else _text(next_cursor))

    async def count(self, match: Match) -> Usage:
        items = held = 0
        cursor = "0"
        while True:
            next_cursor, found, size = await self._call("count", *_matching(match), cursor, _SCAN_COUNT)
            items, held = items + int(found), held + int(size)
            if next_cursor in (b"0", 0):
                return Usage(items=items, bytes=held)
            cursor = _text(next_cursor)

    async def remove_matching(self, match: Match) -> int:
        removed = 0
        cursor = "0"
        while True:
            next_cursor, dropped, _ = await self._call("remove_matching", *_matching(match), cursor, _SCAN_COUNT)
            removed += int(dropped)
            if next_cursor in (b"0", 0):
                return removed
            cursor = _text(next_cursor)

    async def remove_all(self) -> None:
        # Not one script: a namespace can be large, and a SCAN never blocks the server for long. An item
        # saved concurrently may lose its index entries; it is cleaned up when next met.
        self._check_circuit()
        pattern = _glob_escape(self._prefix) + "*"
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
        left = self._open_until - time.monotonic()
        if left > 0:
            raise RedisUnavailable(
                f"Redis did not answer within {self.socket_timeout_s:g} s; not asked again for {left:.1f} s "
                f"(cooldown_s={self.cooldown_s:g})"
            )

    def _trip(self, waited_s: float) -> None:
        self._open_until = time.monotonic() + self.cooldown_s
        logger.warning(
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


def _expiry(expires_at: float | None) -> tuple[str, str]:
    """The expiry in whole milliseconds for Redis, and exactly as given for the item's hash."""
    if expires_at is None:
        return "", ""
    return str(math.ceil(expires_at * 1000)), repr(float(expires_at))


def _tag(tag: str | None) -> tuple[str, str]:
    """A tag for the script: whether there is one, and its text (None and "" are different tags)."""
    return ("0", "") if tag is None else ("1", tag)


def _matching(match: Match) -> tuple[str, str, str, str, str]:
    """A `Match` as the script's arguments: the group, then whether a server is given and which, and the tool."""
    server, tool = match.server, match.tool
    return match.group, "0" if server is None else "1", server or "", "0" if tool is None else "1", tool or ""


def _scan_cursor(cursor: str | None) -> str:
    if cursor is None:
        return "0"
    if not cursor.isdigit():
        raise ValueError(f"not a listing cursor of this store: {cursor!r}")
    return cursor


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _version(fields: Sequence[object]) -> bytes:
    """The save version a load or peek read (the last field), for `drop_corrupt`."""
    version = fields[-1] if fields else None
    return version if isinstance(version, bytes) else b""


def _decode_fields(fields: Sequence[object], *, verify: bool = True) -> tuple[Item | None, str]:
    """The item from its hash fields, or None and what is wrong: a field missing or malformed, or a body
    that does not match its checksum (a record written before checksums were kept has none)."""
    if len(fields) != 11:
        return None, "unexpected fields"
    raw_meta, body, group, created, expiry, tag, stamp, checksum, server, tool = fields[:10]
    if not (
        isinstance(raw_meta, bytes)
        and isinstance(group, bytes)
        and isinstance(created, bytes)
        and isinstance(expiry, bytes)
        and isinstance(stamp, bytes)
        and (tag is None or isinstance(tag, bytes))
        and (server is None or isinstance(server, bytes))
        and (tool is None or isinstance(tool, bytes))
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
        server_label = "" if server is None else server.decode()
        tool_label = "" if tool is None else tool.decode()
    except ValueError:  # UnicodeDecodeError is a ValueError too
        return None, "a field is malformed"
    if meta is None:
        return None, "the metadata is not a JSON object"
    if not (math.isfinite(created_at) and math.isfinite(stamp_value)) or (
        expires_at is not None and math.isnan(expires_at)
    ):
        return None, "a time is not a number"
    if verify and body_checksum(body) != checksum_text:
        return None, "the body does not match its checksum"
    item = Item(
        meta, body, group_name, created_at, expires_at, tag_text, stamp_value, checksum_text, server_label, tool_label
    )
    return item, ""


def _glob_escape(text: str) -> str:
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)
