-- release.lua: free an exclusive lock, only for the holding named.
--
-- KEYS[1]  the lock (see acquire.lua).
-- ARGV[1]  the holding: '<owner token>:<fencing token>', or '<owner token>:' for whatever
--          holding the owner has (release by owner token). One argument, not three: each
--          argument costs the server about a tenth of what the whole call does.
--
-- Returns 1  freed: the key is deleted and, if a waiter found this holding held (the '+' mark,
--            set by acquire.lua in the script that answered it), '' is published on the lock's
--            channel (the key and ':free') in the same script, so a waiter that subscribed
--            before its retry cannot miss it. '' means "wake one waiter" to each subscribed
--            client. A holding nobody waited for publishes nothing (the uncontended cycle sends
--            no message).
--         0  that holding is not there: nothing changed (someone else's lock, or a newer holding
--            of the same owner, is safe).
local held = redis.call('GET', KEYS[1])
local named = ARGV[1]
-- A plain find, not a match or a substring: it builds no string.
if not held or string.find(held, named, 1, true) ~= 1 then
  return 0
end
-- The fencing token must end where the name does (':12' is not ':123'): what follows it is the
-- record's tab, the waiter's '+' or nothing. A name ending in ':' takes any token.
local after = string.byte(held, #named + 1)
if after and after ~= 9 and after ~= 43 and string.byte(named, -1) ~= 58 then
  return 0
end
redis.call('DEL', KEYS[1])
if string.byte(held, -1) == 43 then
  redis.call('PUBLISH', KEYS[1] .. ':free', '')
end
return 1
