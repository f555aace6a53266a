-- sem_release.lua: drop one hold of a permit, only for its holder; give the permit back at zero.
--
-- KEYS[1]  holders (owner → lease end ms); KEYS[2] holds (see sem_acquire.lua).
-- ARGV[1]  owner token; ARGV[2] the semaphore's channel.
--
-- Returns -1 the owner holds no live permit (nothing changed); n>0 holds left; 0 the permit is
-- back, and '' ("wake one waiter") is published on the channel.
local now = now_ms()
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not ends) or tonumber(ends) <= now then
  return -1
end
local left = redis.call('HINCRBY', KEYS[2], ARGV[1], -1)
if left > 0 then
  return left
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1], 't:' .. ARGV[1])
redis.call('PUBLISH', ARGV[2], '')
return 0
