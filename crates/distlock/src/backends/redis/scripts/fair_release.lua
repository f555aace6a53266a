-- fair_release.lua: free a fair lock, only for the holding named, and wake the first in line.
--
-- KEYS[1]  the lock hash; KEYS[2] the queue (see fair_acquire.lua).
-- ARGV[1]  owner token; ARGV[2] the lock's channel; ARGV[3] the holding's fencing token, or ''
--          for whatever holding the owner has.
--
-- Returns 1 freed, 0 that holding is not there (nothing changed). When freed, the SHA-1 of the
-- queue head's owner token is published, so exactly that waiter (in whichever client) wakes.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0
    or not same_holding(redis.call('HGET', KEYS[1], '#fence'), ARGV[3]) then
  return 0
end
redis.call('DEL', KEYS[1])
local head = redis.call('LINDEX', KEYS[2], 0)
if head then
  redis.call('PUBLISH', ARGV[2], redis.sha1hex(head))
end
return 1
