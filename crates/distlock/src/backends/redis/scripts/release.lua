-- release.lua: free an exclusive lock, only for the holding named.
--
-- KEYS[1]  the lock hash (see acquire.lua).
-- ARGV[1]  owner token; ARGV[2] the lock's pub/sub channel; ARGV[3] the holding's fencing token,
--          or '' for whatever holding the owner has (release by owner token).
--
-- Returns 1  freed: the key is deleted and '' is published on the channel in the same script, so
--            a waiter that subscribed before its retry cannot miss it. '' means "wake one
--            waiter" to each subscribed client.
--         0  that holding is not there: nothing changed (someone else's lock, or a newer holding
--            of the same owner, is safe).
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0
    or not same_holding(redis.call('HGET', KEYS[1], '#fence'), ARGV[3]) then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], '')
return 1
