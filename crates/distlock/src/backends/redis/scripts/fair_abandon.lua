-- fair_abandon.lua: a waiter gives up (timeout, cancellation) and leaves the queue at once.
--
-- KEYS[1]  the lock hash; KEYS[2] the queue; KEYS[3] the waiters' deadlines (fair_acquire.lua).
-- ARGV[1]  owner token; ARGV[2] the lock's channel.
--
-- Returns 1 if the owner was in the queue, 0 if not. If it was first in line and the lock is
-- free, the new head is told (SHA-1 of its token), so nobody waits on a waiter that left.
local was_head = redis.call('LINDEX', KEYS[2], 0) == ARGV[1]
local removed = redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if was_head and redis.call('EXISTS', KEYS[1]) == 0 then
  local head = redis.call('LINDEX', KEYS[2], 0)
  if head then
    redis.call('PUBLISH', ARGV[2], redis.sha1hex(head))
  end
end
if removed > 0 then
  return 1
end
return 0
