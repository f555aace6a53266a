-- sem_extend.lua: restart the lease of one permit, only for the holding named.
--
-- KEYS[1]  holders (owner → lease end ms); KEYS[2] holds (see sem_acquire.lua).
-- ARGV[1]  owner token; ARGV[2] lease in ms; ARGV[3] the holding's fencing token.
--
-- Returns 1 if that permit was still live (its lease restarts), 0 if not (nothing changed: a
-- permit whose lease ended may already be someone else's).
local lease = tonumber(ARGV[2])
local now = now_ms()
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not ends) or tonumber(ends) <= now
    or not same_holding(redis.call('HGET', KEYS[2], 't:' .. ARGV[1]), ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
keep_for(KEYS[1], lease)
keep_for(KEYS[2], lease)
return 1
