-- release.lua: drop one hold of an exclusive lock, only for its owner; free it at zero.
--
-- KEYS[1]  the lock hash (see acquire.lua).
-- ARGV[1]  owner token; ARGV[2] the lock's pub/sub channel.
--
-- Returns -1  the owner does not hold the lock: nothing changed (someone else's lock is safe).
--         n>0 holds the owner still has (re-entry); the lease is left as it is.
--         0   the lock is free: the key is deleted and '' is published on the channel in the
--             same script, so a waiter that subscribed before its retry cannot miss it. '' means
--             "wake one waiter" to each subscribed client.
local holds = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if not holds then
  return -1
end
if holds > 1 then
  return redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], '')
return 0
