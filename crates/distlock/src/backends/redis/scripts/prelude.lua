-- prelude.lua: helpers put in front of distlock's scripts (not a script on its own); a script gets
-- this file's constants and only the helpers it calls (scripts.rs: each is a closure made per call).
--
-- Defines:
--   now_ms()             the server's clock in milliseconds (TIME): every lease is judged by
--                        this one clock, never by a client's.
--   next_fence(key)      bumps and returns the fencing counter stored at `key`; the counter
--                        lives FENCE_TTL_MS from its creation, then starts again from the clock.
--   keep_for(key, ms)    makes `key` live at least `ms` more milliseconds (never shortens it).
--   same_holding(stored, wanted)
--                        whether the fencing token stored for a holding is the one the caller
--                        names ('' names any holding of the owner: release by owner token).
--   holding_token(value, owner)
--                        the fencing token (a decimal string) of the exclusive lock's holding
--                        `value` if it is `owner`'s, else nil (see acquire.lua for the layout).
--   took_at(now, record) what a take stores beside its holding: '<server ms>\t<holder record>'
--                        (nil without a record: a client of an older version sent none).
--
-- Holdings: the store keeps one holding per owner and lock; re-entry is counted by the client.
-- Every extend and release names the holding by its token, so a guard of an earlier holding of
-- the same owner never renews or frees a later one.
--
-- Fencing invariant: the counter starts at the server's clock in microseconds when it is created
-- (first use, or after it expired or was lost in a restart of a Redis that keeps nothing on
-- disk), and goes up by one per take. A counter therefore stays below the clock as long as its
-- name is taken less than once per microsecond on average (Redis cannot do a million takes a
-- second), so a counter created later always starts above every token handed out before. It
-- breaks only if the server's clock is set back while the counter is lost. The hot path is one
-- INCR; TIME only runs when the counter is new. Tokens stay below 2^53 (Lua numbers are doubles)
-- until the year 2255.
local FENCE_TTL_MS = 86400000

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function next_fence(key)
  local token = redis.call('INCR', key)
  if token == 1 then
    local t = redis.call('TIME')
    token = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', key, string.format('%.0f', token), 'PX', FENCE_TTL_MS)
  end
  return token
end

local function same_holding(stored, wanted)
  return stored ~= false and stored ~= nil and (wanted == '' or stored == wanted)
end

local function holding_token(value, owner)
  if not value or string.sub(value, 1, #owner + 1) ~= owner .. ':' then
    return nil
  end
  -- Only the digits: the holder record and a waiter's '+' mark may follow them.
  return string.match(value, '^%d+', #owner + 2)
end

local function took_at(now, record)
  if not record or record == '' then
    return nil
  end
  return string.format('%d', now) .. '\t' .. record
end

local function keep_for(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end
