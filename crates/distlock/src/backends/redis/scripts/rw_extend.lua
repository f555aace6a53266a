-- rw_extend.lua: restart the lease of one side of a read-write lock, only for the holding named.
--
-- KEYS[1] writer hash; KEYS[2] readers; KEYS[3] reader holds (see rw_acquire.lua).
-- ARGV[1] owner token; ARGV[2] lease in ms; ARGV[3] the holding's fencing token; ARGV[4] 'read'
-- or 'write'.
--
-- Returns 1 if that holding is still live (its lease restarts), 0 if its lease had ended, it is
-- a newer holding, or it never existed (nothing changed).
local owner = ARGV[1]
local lease = tonumber(ARGV[2])
local now = now_ms()
if ARGV[4] == 'read' then
  local ends = redis.call('ZSCORE', KEYS[2], owner)
  if (not ends) or tonumber(ends) <= now
      or not same_holding(redis.call('HGET', KEYS[3], 't:' .. owner), ARGV[3]) then
    return 0
  end
  redis.call('ZADD', KEYS[2], now + lease, owner)
  keep_for(KEYS[2], lease)
  keep_for(KEYS[3], lease)
  return 1
end
if redis.call('HGET', KEYS[1], 'w') ~= owner
    or tonumber(redis.call('HGET', KEYS[1], 'wexp')) <= now
    or not same_holding(redis.call('HGET', KEYS[1], 'wt'), ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], 'wexp', now + lease)
redis.call('PEXPIRE', KEYS[1], lease)
return 1
