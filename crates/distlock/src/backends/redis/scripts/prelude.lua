-- prelude.lua: helpers put in front of distlock's scripts (not a script on its own); a script gets
-- this file's constants and only the helpers it calls (scripts.rs: each is a closure made per call).
--
-- Defines:
--   now_ms()             the server's clock in milliseconds (TIME): every lease is judged by
--                        this one clock, never by a client's.
--   now_us()             the same in microseconds.
--   next_fence(key, now) the next fencing token of the counter at `key`: its value plus one, or
--                        the server's clock in µs if that is larger (see the invariant below);
--                        the counter keeps it. `now` is the clock in µs if the caller has read
--                        it (a TIME costs the server as much as a GET and an INCR together),
--                        else nil.
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
-- Fencing invariant: every take's token is the larger of the counter plus one and the server's
-- clock in microseconds, and the counter keeps the last token. Behind Sentinel a promoted replica
-- may have missed the master's last takes (replication is asynchronous): its counter is behind,
-- and a counter alone would hand out again a token already given. The clock part keeps tokens
-- above every earlier one as long as the new master's clock is not behind the old one's by more
-- than the time the failover took (a counter lost in a restart, or expired, is covered the same
-- way). Where the clock is set back, the counter part still makes tokens increase on one server.
-- Each take costs one TIME and one INCRBY beside its INCR; tokens stay below 2^53 (Lua numbers
-- are doubles) until the year 2255. The counter lives FENCE_TTL_MS from its creation, then starts
-- again from the clock.
local FENCE_TTL_MS = 86400000
-- Redlock's masters run these scripts with this false (scripts.rs: COUNTER_SCRIPTS): their
-- counters are raised into line after a take, and clock parts (each master's own clock) would
-- never be in line, costing every take a second round. They have no replicas to lose steps to.
local FENCE_FOLLOWS_CLOCK = true

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function next_fence(key, now)
  local token = redis.call('INCR', key)
  if token ~= 1 and not FENCE_FOLLOWS_CLOCK then
    return token
  end
  local clock = now or now_us()
  -- Nearly always: the counter is behind the clock (takes are far rarer than one per µs).
  -- INCRBY rather than SET: it keeps the counter's expiry and needs no string.format (each was
  -- a few µs of server time per take; the difference is exact below 2^53).
  if token < clock then
    redis.call('INCRBY', key, clock - token)
    if token == 1 then
      redis.call('PEXPIRE', key, FENCE_TTL_MS)
    end
    token = clock
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
