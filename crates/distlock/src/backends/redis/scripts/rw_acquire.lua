-- rw_acquire.lua: take one side of a read-write lock, confirm our holding, or report it blocked.
--
-- KEYS[1]  the writer: a hash, 'w' = owner, 'wh' = 1, 'wexp' = server ms its lease ends,
--          'wt' = its fencing token, 'took' = '<taken, server ms>\t<holder record>' (see
--          prelude.lua's took_at; absent without a record) (PEXPIRE = the lease, so a crashed
--          writer's hash vanishes).
-- KEYS[2]  readers: a sorted set, owner → server ms at which its read lease ends.
-- KEYS[3]  reader holds: a hash, field <owner> = 1, 't:'<owner> = its fencing token,
--          'h:'<owner> = its took_at (absent without a record).
-- KEYS[4]  waiting writers: a sorted set, owner → server ms by which it must ask again.
-- KEYS[5]  the lock's fencing counter, shared by both sides (see prelude.lua).
-- ARGV[1]  owner token; ARGV[2] lease in ms; ARGV[3] 'read' or 'write'; ARGV[4] waiter ttl ms;
-- ARGV[5]  the holder record (distlock::Holder), optional.
--
-- Returns {1, token}  taken, or our own holding confirmed (same token, lease restarts).
--         {0, ms}     blocked; ms = until the blocking lease ends (at most a third of the waiter
--                     ttl while writers wait, so a waiting writer keeps its place).
--         {-1, 0}     a reader asked for the write side: upgrading could deadlock two readers,
--                     so it is refused (release the read lock first).
-- Rules: any number of readers or one writer. The writer may also take the read side (it
-- covers it). Writer preference: while a live writer waits, new readers wait too (readers
-- already holding are confirmed), so a stream of readers cannot starve writers. Expired readers,
-- writers and waiting writers are purged first, so a crashed holder blocks for one lease at most.
local owner = ARGV[1]
local lease = tonumber(ARGV[2])
local waiter_ttl = tonumber(ARGV[4])
local now = now_ms()

local writer = redis.call('HGET', KEYS[1], 'w')
local writer_ends = 0
if writer then
  writer_ends = tonumber(redis.call('HGET', KEYS[1], 'wexp'))
  if writer_ends <= now then
    redis.call('DEL', KEYS[1])
    writer = false
  end
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, gone in ipairs(expired) do
  redis.call('ZREM', KEYS[2], gone)
  redis.call('HDEL', KEYS[3], gone, 't:' .. gone, 'h:' .. gone)
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)

local function first_score(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return tonumber(first[2])
end

local function blocked(ms)
  return {0, math.max(math.min(ms, math.floor(waiter_ttl / 3)), 1)}
end

if ARGV[3] == 'read' then
  if redis.call('ZSCORE', KEYS[2], owner) then
    redis.call('ZADD', KEYS[2], now + lease, owner)
    keep_for(KEYS[2], lease)
    keep_for(KEYS[3], lease)
    return {1, tonumber(redis.call('HGET', KEYS[3], 't:' .. owner))}
  end
  if writer and writer ~= owner then
    return {0, math.max(writer_ends - now, 1)}
  end
  if (not writer) and redis.call('ZCARD', KEYS[4]) > 0 then
    return blocked(first_score(KEYS[4]) - now)
  end
  local token = next_fence(KEYS[5])
  redis.call('HSET', KEYS[3], owner, 1, 't:' .. owner, string.format('%.0f', token))
  local took = took_at(now, ARGV[5])
  if took then
    redis.call('HSET', KEYS[3], 'h:' .. owner, took)
  end
  redis.call('ZADD', KEYS[2], now + lease, owner)
  keep_for(KEYS[2], lease)
  keep_for(KEYS[3], lease)
  return {1, token}
end

if writer == owner then
  redis.call('HSET', KEYS[1], 'wexp', now + lease)
  redis.call('PEXPIRE', KEYS[1], lease)
  return {1, tonumber(redis.call('HGET', KEYS[1], 'wt'))}
end
if redis.call('ZSCORE', KEYS[2], owner) then
  return {-1, 0}
end
local wait = nil
if writer then
  wait = writer_ends - now
elseif redis.call('ZCARD', KEYS[2]) > 0 then
  wait = first_score(KEYS[2]) - now
end
if wait then
  redis.call('ZADD', KEYS[4], now + waiter_ttl, owner)
  redis.call('PEXPIRE', KEYS[4], waiter_ttl * 2)
  return blocked(wait)
end
redis.call('ZREM', KEYS[4], owner)
local token = next_fence(KEYS[5])
redis.call('HSET', KEYS[1], 'w', owner, 'wh', 1, 'wexp', now + lease,
  'wt', string.format('%.0f', token))
local took = took_at(now, ARGV[5])
if took then
  redis.call('HSET', KEYS[1], 'took', took)
end
redis.call('PEXPIRE', KEYS[1], lease)
return {1, token}
