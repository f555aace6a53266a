-- rw_release.lua: drop one hold of one side of a read-write lock, only for its holder.
--
-- KEYS[1] writer hash; KEYS[2] readers; KEYS[3] reader holds (see rw_acquire.lua).
-- ARGV[1] owner token; ARGV[2] 'read' or 'write'; ARGV[3] the lock's channel.
--
-- Returns -1 not held (nothing changed); n>0 holds left on that side; 0 that side is released.
-- When the last reader leaves, '' (wake one: a writer can now go) is published; when the writer
-- leaves, '*' (wake every waiter: all readers may go at once).
local owner = ARGV[1]
local now = now_ms()
if ARGV[2] == 'read' then
  local ends = redis.call('ZSCORE', KEYS[2], owner)
  if (not ends) or tonumber(ends) <= now then
    return -1
  end
  local left = redis.call('HINCRBY', KEYS[3], owner, -1)
  if left > 0 then
    return left
  end
  redis.call('ZREM', KEYS[2], owner)
  redis.call('HDEL', KEYS[3], owner, 't:' .. owner)
  if redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf') == 0 then
    redis.call('PUBLISH', ARGV[3], '')
  end
  return 0
end
if redis.call('HGET', KEYS[1], 'w') ~= owner
    or tonumber(redis.call('HGET', KEYS[1], 'wexp')) <= now then
  return -1
end
local left = redis.call('HINCRBY', KEYS[1], 'wh', -1)
if left > 0 then
  return left
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[3], '*')
return 0
