-- sem_acquire.lua: take one permit of a semaphore, confirm ours, or report all taken.
--
-- KEYS[1]  holders: a sorted set, owner → server ms at which its permit's lease ends.
-- KEYS[2]  holds: a hash, field <owner> = 1, field 't:'<owner> = its fencing token, field
--          'h:'<owner> = its took_at (see prelude.lua; absent without a record).
-- KEYS[3]  the semaphore's fencing counter (see prelude.lua).
-- ARGV[1]  owner token; ARGV[2] lease in ms; ARGV[3] permits in all;
-- ARGV[4]  the holder record (distlock::Holder), optional.
--
-- Returns {1, token}  a permit taken (new token) or ours confirmed (same token, lease restarts).
--         {0, ms}     all permits taken; ms = until the first permit's lease ends.
-- Invariants: each permit has its own lease; a permit whose lease ended (crashed holder) is
-- purged before counting, so it comes back without anyone releasing it. The keys live as long
-- as the longest lease. Callers should agree on the number of permits; each call counts with
-- its own ARGV[3].
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

if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
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
