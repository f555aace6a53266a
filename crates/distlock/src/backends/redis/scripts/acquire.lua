-- acquire.lua: take the exclusive lock, confirm the owner's own holding, or report it held.
--
-- KEYS[1]  the lock: a string '<owner token>:<fencing token>\t<taken, server ms>\t<holder
--          record>\n', with '+' appended once a waiter found it held (see release.lua); its PTTL
--          is the lease. A plain string rather than a hash so that a take is one SET and a
--          release one GET and one DEL: this script is the hot path of every lock, and each call
--          inside it costs the server about as much as a command sent on its own. The part after
--          the token (written only by a take, read only by status.lua) is absent in holdings
--          taken without a record. The record has no control characters, so the '\n' ends it
--          whatever it contains.
-- KEYS[2]  the lock's fencing counter (see prelude.lua).
-- ARGV[1]  owner token (32 hex digits, so never containing ':'); ARGV[2] lease in ms;
-- ARGV[3]  the holder record (distlock::Holder), optional.
--
-- Returns  token > 0   taken (token just drawn), or the owner's own holding confirmed (its
--                      token); either way the lease restarts.
--          -1 - pttl   another owner holds it, with pttl ms of its lease left (so never 0).
--                      The holding is marked '+', so its release publishes a wake-up.
--          One number, not a pair: a table answer costs the server as much again as a GET.
-- Invariant: the key exists iff the lock is held, and then names exactly one owner and the
-- token its take drew. The counter only moves when the lock is taken.
local held = redis.call('GET', KEYS[1])
if not held then
  -- One TIME for the token's clock part and the record's 'since' (a re-take keeps its first
  -- 'since'; a take that finds the lock held reads no clock).
  local now = now_us()
  local token = next_fence(KEYS[2], now)
  local value
  if ARGV[3] and ARGV[3] ~= '' then
    value = string.format('%s:%d\t%d\t%s\n', ARGV[1], token, math.floor(now / 1000), ARGV[3])
  else
    value = string.format('%s:%d', ARGV[1], token)
  end
  redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
  return token
end
local mine = holding_token(held, ARGV[1])
if mine then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(mine)
end
-- Marked in the same script that answers "held": a waiter subscribes before it retries, so the
-- release it waits for is one that publishes. APPEND keeps the key's expiry.
if string.byte(held, -1) ~= 43 then
  redis.call('APPEND', KEYS[1], '+')
end
return -1 - math.max(redis.call('PTTL', KEYS[1]), 0)
