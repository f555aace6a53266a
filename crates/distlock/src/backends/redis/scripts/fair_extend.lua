-- fair_extend.lua: restart the lease of a fair lock, only for the holding named (the
-- watchdog, and re-entry's confirmation).
--
-- KEYS[1]  the lock hash (see fair_acquire.lua).
-- ARGV[1]  owner token; ARGV[2] lease in ms; ARGV[3] the holding's fencing token.
--
-- Returns 1 if that holding is still the owner's (its lease now restarts), 0 otherwise (the
-- lease ended, someone else holds it, or it is a newer holding: nothing is changed).
local held = redis.call('HMGET', KEYS[1], ARGV[1], '#fence')
if held[1] and same_holding(held[2], ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
