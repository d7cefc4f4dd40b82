-- mcpcache's RedisStore: every operation is one run of this script on one shard of a namespace (all its keys
-- share one hash tag, so one cluster slot), so each is atomic across processes (see
-- mcpcache/stores/redis.py for the key layout, the shards and the contract).
local P = ARGV[1]
local op = ARGV[2]
local IDLE = ARGV[3]
-- '1': this shard is the whole namespace (one Redis), so it enforces the bounds itself; '0': one of a
-- cluster's shards, whose bounds the store enforces across shards ('oldest', 'evict').
local ALONE = ARGV[4] == '1'
local A = {}
for i = 5, #ARGV do A[i - 4] = ARGV[i] end
local U, D, LRU, X, GROUPS = P .. 'u', P .. 'd', P .. 'lru', P .. 'x', P .. 'groups'
local TICK, CUR, EPOCH = P .. 'tick', P .. 'sweep', P .. 'epoch'
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function num(v) return tonumber(v or '0') or 0 end
local function group_of(d) return string.sub(d, string.find(d, ' ', 1, true) + 1) end

-- The directory's mark: a field of the directory itself, so Redis evicts it with the directory and never
-- alone. Item keys are UTF-8 and never hold byte 255, so no item takes its name. 'whole' says every item
-- held has a directory entry; a scan's token says a count is looking at every item to make it so. Its value
-- has the form of an entry ("<size> <group>", in a group no item is in) so that versions of the store
-- that do not know the mark pass over it.
local MARK = '\255'
local WHOLE = '0 \255whole'
local SCANNING = '0 \255scan '
local function is_mark(k) return string.byte(k, 1) == 255 end
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

-- Uses are ordered by the server's clock in microseconds (strictly increasing within a shard): the shards
-- of a cluster namespace each keep their own order, and the store merges them by these scores when it
-- evicts across shards. (Below 2^53, so exact as a Lua number and as a sorted-set score.)
local function next_tick()
  local tick = math.max(now_us, (tonumber(redis.call('GET', TICK) or '0') or 0) + 1)
  redis.call('SET', TICK, string.format('%d', tick))
  return tick
end

local function touch(k, g)
  local tick = next_tick()
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
-- The directory keeps its mark: the entries of the items held stay, so what the mark says stays true.
local function rebuild()
  local entries = redis.call('HGETALL', D)
  local groups = {}
  for _, g in ipairs(redis.call('ZRANGE', GROUPS, 0, -1)) do groups[g] = true end
  for i = 1, #entries, 2 do
    if not is_mark(entries[i]) then groups[group_of(entries[i + 1])] = true end
  end
  for g, _ in pairs(groups) do redis.call('DEL', P .. 'g:' .. g, P .. 'c:' .. g) end
  redis.call('DEL', U, LRU, X, GROUPS, D)
  for i = 1, #entries, 2 do
    local k = entries[i]
    if is_mark(k) then
      redis.call('HSET', D, k, entries[i + 1])
    elseif is_hash(P .. 'i:' .. k) then
      reindex(k, P .. 'i:' .. k)
    end
  end
end

-- Every key here may be evicted by Redis (maxmemory); the directory is the index's authority.
local function check_index()
  if redis.call('EXISTS', D) == 0 then
    -- No directory: a new namespace, one emptied before it was ever counted (Redis deletes a hash left
    -- empty), or one whose directory Redis evicted, mark and all. The rest of the index no longer says
    -- anything true. Items still held are indexed again when next loaded, or by the next `usage`, which
    -- finds the directory (recreated by the next save) without its mark and looks at every item.
    if redis.call('EXISTS', U, LRU, X, GROUPS) > 0 then
      for _, g in ipairs(redis.call('ZRANGE', GROUPS, 0, -1)) do redis.call('DEL', P .. 'g:' .. g, P .. 'c:' .. g) end
      redis.call('DEL', U, LRU, X, GROUPS)
    end
  elseif redis.call('EXISTS', U, LRU, GROUPS) < 3 and redis.call('HLEN', D) > redis.call('HEXISTS', D, MARK) then
    -- (A directory holding only its mark has no counts, LRU entries or groups to keep.)
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

-- Since when the process now serving this shard has served it (ms, by its clock). Replication is
-- asynchronous: a failover (a replica promoted: a new replication id) or a restart (a new run id) may have
-- lost writes acknowledged before it, a freshness mark among them, so the store treats every freshness
-- granted before this moment as possibly ended (mcpcache.stores.base `lost_before`). The marker is noted in
-- the shard itself; a missing one means a new or emptied shard, which lost nothing another shard depends
-- on only when it is the whole namespace.
local function since()
  local info = redis.call('INFO', 'server') .. redis.call('INFO', 'replication')
  local marker = (string.match(info, 'run_id:(%w+)') or '') .. ' ' .. (string.match(info, 'master_replid:(%w+)') or '')
  local held = redis.call('HMGET', EPOCH, 'm', 's')
  if held[1] == marker and held[2] then return held[2] end
  local from = string.format('%d', now_ms)
  if not held[1] and ALONE then from = '0' end
  redis.call('HSET', EPOCH, 'm', marker, 's', from)
  return from
end

check_index()
purge_expired()

if op == 'load' then
  -- The shard's `since`, then the item's fields (false when there is none).
  local k, most = A[1], tonumber(A[2] or '')
  local ik = P .. 'i:' .. k
  local kind = redis.call('TYPE', ik)['ok']
  local d = redis.call('HGET', D, k)
  if kind ~= 'hash' then
    if kind ~= 'none' or d then drop(k) end
    return {since(), false}
  end
  -- A body larger than the caller can take within its timeout: only its length, and no use counted (the
  -- caller asks again with a timeout for that length, and that load counts).
  local length = redis.call('HSTRLEN', ik, 'b')
  if most and length > most then return {since(), {length}} end
  if d then touch(k, group_of(d)) else reindex(k, ik) end
  local fields = redis.call('HMGET', ik, 'm', 'b', 'g', 'c', 'x', 't', 's', 'k', 'sv', 'tl', 'v')
  if fields[5] == '' and IDLE ~= '' then redis.call('PEXPIRE', ik, IDLE) end
  return {since(), fields}

elseif op == 'peek' then
  -- The shard's `since`, then every key's fields but the body, in one script: one consistent moment across
  -- the keys.
  local out = {since()}
  for i = 1, #A do
    local k = A[i]
    local ik = P .. 'i:' .. k
    local kind = redis.call('TYPE', ik)['ok']
    local d = redis.call('HGET', D, k)
    if kind ~= 'hash' then
      if kind ~= 'none' or d then drop(k) end
      out[i + 1] = {}
    else
      if d then touch(k, group_of(d)) else reindex(k, ik) end
      local fields = redis.call('HMGET', ik, 'm', 'g', 'c', 'x', 't', 's', 'k', 'sv', 'tl', 'v')
      if fields[4] == '' and IDLE ~= '' then redis.call('PEXPIRE', ik, IDLE) end
      out[i + 1] = fields
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
  if ALONE then make_room(tonumber(size), 1, max_b, max_n) end
  local ik = P .. 'i:' .. k
  local version = string.format('%d', next_tick())
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
  if ALONE then make_room(size, 1, max_b, max_n) end
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
    if not is_mark(k) and group_of(entries[i + 1]) == g then
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
  -- Redis evicted the directory, or in a namespace never counted); the next cursor, '0' at the end.
  local scanned = redis.call('SCAN', A[1], 'MATCH', P .. 'i:*', 'COUNT', tonumber(A[2]))
  for _, ik in ipairs(scanned[2]) do
    local k = string.sub(ik, #P + 3)
    if not redis.call('HGET', D, k) and is_hash(ik) then reindex(k, ik) end
  end
  return scanned[1]

elseif op == 'whole' then
  -- Whether every item held has a directory entry: '' when the directory's mark says so. Otherwise the
  -- token of the scan that is to make it so: the one under way, or A[1], marked now (creating the directory
  -- if there is none).
  local mark = redis.call('HGET', D, MARK)
  if mark == WHOLE then return '' end
  if mark and string.sub(mark, 1, #SCANNING) == SCANNING then return string.sub(mark, #SCANNING + 1) end
  redis.call('HSET', D, MARK, SCANNING .. A[1])
  return A[1]

elseif op == 'found' then
  -- A scan that started with the directory marked with token A[1] met every item: if the mark is still
  -- there, the directory was not evicted since, and every item held has an entry. 1 when the directory is
  -- whole now, 0 when it was evicted meanwhile (and the count must look again).
  local mark = redis.call('HGET', D, MARK)
  if mark == SCANNING .. A[1] then
    redis.call('HSET', D, MARK, WHOLE)
    mark = WHOLE
  end
  if mark == WHOLE then return 1 end
  return 0

elseif op == 'oldest' then
  -- For eviction across a cluster's shards: this shard's item and byte counts (of the namespace, or with
  -- A[1] == '1' of group A[2]), then key, use score and size of its up to A[3] least recently used items;
  -- entries of items Redis evicted on its own are dropped first.
  local z, count = LRU, tonumber(A[3])
  if A[1] == '1' then
    check_group(A[2])
    z = P .. 'g:' .. A[2]
  end
  local ranked = {}
  for _ = 1, 8 do
    ranked = redis.call('ZRANGE', z, 0, count - 1, 'WITHSCORES')
    local ks = {}
    for i = 1, #ranked, 2 do ks[#ks + 1] = ranked[i] end
    if prune(ks) == 0 then break end
  end
  local counts
  if A[1] == '1' then
    counts = redis.call('HMGET', U, 'n:' .. A[2], 'b:' .. A[2])
  else
    counts = redis.call('HMGET', U, 'n', 'b')
  end
  local out = {num(counts[1]), num(counts[2])}
  for i = 1, #ranked, 2 do
    local d = redis.call('HGET', D, ranked[i])
    out[#out + 1] = ranked[i]
    out[#out + 1] = ranked[i + 1]
    out[#out + 1] = d and string.sub(d, 1, string.find(d, ' ', 1, true) - 1) or '0'
  end
  return out

elseif op == 'evict' then
  -- Drops each key of the (key, score) pairs from A[3] on that is still unused since 'oldest' read it: its
  -- use score in the namespace's order (or with A[1] == '1', group A[2]'s) unchanged. How many it dropped.
  local z = LRU
  if A[1] == '1' then z = P .. 'g:' .. A[2] end
  local n = 0
  for i = 3, #A, 2 do
    local score = redis.call('ZSCORE', z, A[i])
    if score and tonumber(score) == tonumber(A[i + 1]) then n = n + drop(A[i]) end
  end
  return n

elseif op == 'usage' then
  local g = A[1]
  if g == nil then return redis.call('HMGET', U, 'n', 'b') end
  return redis.call('HMGET', U, 'n:' .. g, 'b:' .. g)
end
return redis.error_reply('mcpcache: unknown store operation ' .. tostring(op))
