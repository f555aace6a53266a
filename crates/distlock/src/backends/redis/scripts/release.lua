-- release.lua: free an exclusive lock, only for the holding named.
--
-- KEYS[1]  the lock (see acquire.lua).
-- ARGV[1]  owner token; ARGV[2] the lock's pub/sub channel; ARGV[3] the holding's fencing token,
--          or '' for whatever holding the owner has (release by owner token).
--
-- Returns 1  freed: the key is deleted and, if a waiter found this holding held (the '+' mark,
--            set by acquire.lua in the script that answered it), '' is published on the channel
--            in the same script, so a waiter that subscribed before its retry cannot miss it.
--            '' means "wake one waiter" to each subscribed client. A holding nobody waited for
--            publishes nothing (the uncontended cycle sends no message).
--         0  that holding is not there: nothing changed (someone else's lock, or a newer holding
--            of the same owner, is safe).
local held = redis.call('GET', KEYS[1])
local token = holding_token(held, ARGV[1])
if not token or (ARGV[3] ~= '' and token ~= ARGV[3]) then
  return 0
end
redis.call('DEL', KEYS[1])
if string.byte(held, -1) == 43 then
  redis.call('PUBLISH', ARGV[2], '')
end
return 1
