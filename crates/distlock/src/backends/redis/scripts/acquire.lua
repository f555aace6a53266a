-- acquire.lua: take the exclusive lock, confirm the owner's own holding, or report it held.
--
-- KEYS[1]  the lock: a string '<owner token>:<fencing token>\t<taken, server ms>\t<holder
--          record>\n', with '+' appended once a waiter found it held (see release.lua); its PTTL
--          is the lease. A plain string rather than a hash so that a take is one SET and a
--          release one GET and one DEL: this script is the hot path of every lock, and each call
--          inside it costs the server a few tenths of a µs. The part after the token (written
--          only by a take, read only by status.lua) is absent in holdings taken without a record.
--          The record has no control characters, so the '\n' ends it whatever it contains.
-- KEYS[2]  the lock's fencing counter (see prelude.lua).
-- ARGV[1]  owner token (32 hex digits, so never containing ':'); ARGV[2] lease in ms;
-- ARGV[3]  the holder record (distlock::Holder), optional.
--
-- Returns {1, token}   taken (token just bumped), or the owner's own holding confirmed (same
--                      token); either way the lease restarts.
--         {0, pttl}    another owner holds it; pttl = ms its lease has left. The holding is
--                      marked '+', so its release publishes a wake-up.
-- Invariant: the key exists iff the lock is held, and then names exactly one owner and the
-- token its take drew. The counter only moves when the lock is taken.
local held = redis.call('GET', KEYS[1])
if not held then
  local token = next_fence(KEYS[2])
  local value = ARGV[1] .. ':' .. string.format('%d', token)
  -- TIME only here, on an actual take: a re-take keeps its first 'since', and the cycles that
  -- find the lock held or renew it pay nothing for the record.
  local took = ARGV[3] and took_at(now_ms(), ARGV[3])
  if took then
    value = value .. '\t' .. took .. '\n'
  end
  redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
  return {1, token}
end
local mine = holding_token(held, ARGV[1])
if mine then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(mine)}
end
-- Marked in the same script that answers "held": a waiter subscribes before it retries, so the
-- release it waits for is one that publishes. APPEND keeps the key's expiry.
if string.byte(held, -1) ~= 43 then
  redis.call('APPEND', KEYS[1], '+')
end
return {0, redis.call('PTTL', KEYS[1])}
