-- extend.lua: restart the lease of an exclusive or fair lock, only for its owner (the watchdog).
--
-- KEYS[1]  the lock hash (see acquire.lua).
-- ARGV[1]  owner token; ARGV[2] lease in ms.
--
-- Returns 1 if the owner still held the lock (its lease now restarts), 0 otherwise (the lease
-- ended, or someone else holds it: nothing is changed).
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
