-- acquire.lua: take the exclusive lock, confirm the owner's own holding, or report it held.
--
-- KEYS[1]  the lock: a hash, field <owner token> = 1, field '#fence' = this holding's fencing
--          token, field '#w' = 1 once a waiter found it held (see release.lua); its PEXPIRE is
--          the lease.
-- KEYS[2]  the lock's fencing counter (see prelude.lua).
-- ARGV[1]  owner token; ARGV[2] lease in ms.
--
-- Returns {1, token}   taken (token just bumped), or the owner's own holding confirmed (same
--                      token); either way the lease restarts.
--         {0, pttl}    another owner holds it; pttl = ms its lease has left. The holding is
--                      marked '#w', so its release publishes a wake-up.
-- Invariant: the hash exists iff the lock is held, and then holds exactly one owner field and
-- '#fence' (owner tokens never start with '#').
local held = redis.call('HMGET', KEYS[1], ARGV[1], '#fence')
if not held[2] then
  local token = next_fence(KEYS[2])
  redis.call('HSET', KEYS[1], ARGV[1], 1, '#fence', string.format('%.0f', token))
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token}
end
if held[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(held[2])}
end
-- Marked in the same script that answers "held": a waiter subscribes before it retries, so the
-- release it waits for is one that publishes.
redis.call('HSET', KEYS[1], '#w', 1)
return {0, redis.call('PTTL', KEYS[1])}
