-- sem_acquire.lua: take one permit of a semaphore, confirm ours, or report all taken.
--
-- KEYS[1]  holders: a sorted set, owner → server ms at which its permit's lease ends.
-- KEYS[2]  holds: a hash, field <owner> = 1, field 't:'<owner> = its fencing token, field
--          'h:'<owner> = its took_at (see prelude.lua; absent without a record).
-- KEYS[3]  the semaphore's fencing counter (see prelude.lua).
-- KEYS[4]  the semaphore's size: a number, kept without expiry (set by the first take, changed
--          only by sem_set_permits.lua).
-- ARGV[1]  owner token; ARGV[2] lease in ms; ARGV[3] the permits the caller asks for;
-- ARGV[4]  the holder record (distlock::Holder), optional; ARGV[5] '1' if the caller goes by the
--          kept size whatever it is (a waiter's later attempt, after a resize), else ''.
--
-- Returns {1, token}  a permit taken (new token) or ours confirmed (same token, lease restarts).
--         {0, ms}     all permits taken; ms = until the first permit's lease ends.
--         {2, size}   the kept size is not ARGV[3] (and ARGV[5] is not '1'): nothing changed.
-- Invariants: a semaphore has one size, the first caller's unless changed explicitly, and it
-- stays while the semaphore is empty, so a caller asking another size is refused at any time;
-- a permit is granted only while fewer than that size are live (after a shrink, holders beyond
-- it keep their permits). Each permit has its own lease; a permit whose lease ended (crashed
-- holder) is purged before counting, so it comes back without anyone releasing it. The other
-- keys live as long as the longest lease.
local size = tonumber(redis.call('GET', KEYS[4]))
if not size then
  size = tonumber(ARGV[3])
  redis.call('SET', KEYS[4], ARGV[3])
elseif size ~= tonumber(ARGV[3]) and ARGV[5] ~= '1' then
  return {2, size}
end

local owner = ARGV[1]
local lease = tonumber(ARGV[2])
local now = now_ms()

local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, gone in ipairs(expired) do
  redis.call('ZREM', KEYS[1], gone)
  redis.call('HDEL', KEYS[2], gone, 't:' .. gone, 'h:' .. gone)
end

if redis.call('ZSCORE', KEYS[1], owner) then
  redis.call('ZADD', KEYS[1], now + lease, owner)
  keep_for(KEYS[1], lease)
  keep_for(KEYS[2], lease)
  return {1, tonumber(redis.call('HGET', KEYS[2], 't:' .. owner))}
end

if redis.call('ZCARD', KEYS[1]) < size then
  local token = next_fence(KEYS[3])
  redis.call('ZADD', KEYS[1], now + lease, owner)
  redis.call('HSET', KEYS[2], owner, 1, 't:' .. owner, string.format('%.0f', token))
  local took = took_at(now, ARGV[4])
  if took then
    redis.call('HSET', KEYS[2], 'h:' .. owner, took)
  end
  keep_for(KEYS[1], lease)
  keep_for(KEYS[2], lease)
  return {1, token}
end

local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, math.max(tonumber(first[2]) - now, 1)}
