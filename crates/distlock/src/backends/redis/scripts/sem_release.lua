-- sem_release.lua: give a permit back, only for the holding named.
--
-- KEYS[1]  holders (owner → lease end ms); KEYS[2] holds (see sem_acquire.lua).
-- ARGV[1]  owner token; ARGV[2] the semaphore's channel; ARGV[3] the holding's fencing token, or
--          '' for whatever permit the owner has.
--
-- Returns 1 the permit is back, and '' ("wake one waiter") is published on the channel; 0 that
-- holding has no live permit (nothing changed).
local now = now_ms()
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not ends) or tonumber(ends) <= now
    or not same_holding(redis.call('HGET', KEYS[2], 't:' .. ARGV[1]), ARGV[3]) then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1], 't:' .. ARGV[1], 'h:' .. ARGV[1])
redis.call('PUBLISH', ARGV[2], '')
return 1
