-- prelude.lua: helpers prepended to every distlock script (not a script on its own).
--
-- Defines:
--   now_ms()             the server's clock in milliseconds (TIME): every lease is judged by
--                        this one clock, never by a client's.
--   next_fence(key)      bumps and returns the fencing counter stored at `key`.
--   keep_for(key, ms)    makes `key` live at least `ms` more milliseconds (never shortens it).
--
-- Fencing invariant: a token is max(last token + 1, server time in microseconds). The counter key
-- lives FENCE_TTL_MS after its last use; once it is gone (expired, or lost in a restart of a Redis
-- that keeps nothing on disk) the clock floor alone keeps tokens increasing, because every earlier
-- token was at most "its own take's time in µs + takes within that µs". It breaks only if the
-- server's clock is set back while the counter is lost. Tokens stay below 2^53 (Lua numbers are
-- doubles) until the year 2255.
local FENCE_TTL_MS = 86400000

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function next_fence(key)
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('GET', key) or '0')
  local token = math.max(last + 1, now_us)
  redis.call('SET', key, string.format('%.0f', token), 'PX', FENCE_TTL_MS)
  return token
end

local function keep_for(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end
