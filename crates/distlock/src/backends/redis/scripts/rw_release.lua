-- rw_release.lua: free one side of a read-write lock, only for the holding named.
--
-- KEYS[1] writer hash; KEYS[2] readers; KEYS[3] reader holds (see rw_acquire.lua).
-- ARGV[1] owner token; ARGV[2] the lock's channel; ARGV[3] the holding's fencing token, or '' for
-- whatever holding the owner has; ARGV[4] 'read' or 'write'.
--
-- Returns 1 that side is released, 0 that holding is not there (nothing changed). When the last
-- reader leaves, '' (wake one: a writer can now go) is published; when the writer leaves, '*'
-- (wake every waiter: all readers may go at once).
local owner = ARGV[1]
local now = now_ms()
if ARGV[4] == 'read' then
  local ends = redis.call('ZSCORE', KEYS[2], owner)
  if (not ends) or tonumber(ends) <= now
      or not same_holding(redis.call('HGET', KEYS[3], 't:' .. owner), ARGV[3]) then
    return 0
  end
  redis.call('ZREM', KEYS[2], owner)
  redis.call('HDEL', KEYS[3], owner, 't:' .. owner, 'h:' .. owner)
  if redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf') == 0 then
    redis.call('PUBLISH', ARGV[2], '')
  end
  return 1
end
if redis.call('HGET', KEYS[1], 'w') ~= owner
    or tonumber(redis.call('HGET', KEYS[1], 'wexp')) <= now
    or not same_holding(redis.call('HGET', KEYS[1], 'wt'), ARGV[3]) then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], '*')
return 1
