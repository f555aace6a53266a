-- extend.lua: restart the lease of an exclusive lock, only for the holding named (the
-- watchdog, and re-entry's confirmation).
--
-- KEYS[1]  the lock (see acquire.lua).
-- ARGV[1]  owner token; ARGV[2] lease in ms; ARGV[3] the holding's fencing token.
--
-- Returns 1 if that holding is still the owner's (its lease now restarts), 0 otherwise (the
-- lease ended, someone else holds it, or it is a newer holding: nothing is changed).
if holding_token(redis.call('GET', KEYS[1]), ARGV[1]) == ARGV[3] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
