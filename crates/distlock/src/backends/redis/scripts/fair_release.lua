-- fair_release.lua: drop one hold of a fair lock, only for its owner; at zero free it and wake
-- the first in line.
--
-- KEYS[1]  the lock hash; KEYS[2] the queue (see fair_acquire.lua).
-- ARGV[1]  owner token; ARGV[2] the lock's channel.
--
-- Returns -1 not held by this owner (nothing changed); n>0 holds left; 0 freed. On 0 the SHA-1 of
-- the queue head's owner token is published, so exactly that waiter (in whichever client) wakes.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local left = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if left > 0 then
  return left
end
redis.call('DEL', KEYS[1])
local head = redis.call('LINDEX', KEYS[2], 0)
if head then
  redis.call('PUBLISH', ARGV[2], redis.sha1hex(head))
end
return 0
