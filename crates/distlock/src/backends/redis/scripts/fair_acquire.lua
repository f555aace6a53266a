-- fair_acquire.lua: take the fair lock if it is our turn, confirm our holding, or wait in line.
--
-- KEYS[1]  the lock: a hash, field <owner token> = 1, field '#fence' = this holding's fencing
--          token, field '#took' = '<taken, server ms>\t<holder record>' (see prelude.lua's
--          took_at; absent without a record) (owner tokens never start with '#'); its PEXPIRE
--          is the lease.
-- KEYS[2]  the lock's fencing counter (see prelude.lua).
-- KEYS[3]  the queue: a list of waiting owner tokens, first come first.
-- KEYS[4]  each waiter's deadline: a sorted set, owner → server ms by which it must ask again.
-- ARGV[1]  owner token; ARGV[2] lease in ms; ARGV[3] waiter ttl in ms; ARGV[4] channel;
--          ARGV[5] '1' to wait in line, '0' for a one-off attempt (try_acquire, or the first
--          attempt before the waiter has subscribed), which never joins the queue;
--          ARGV[6]  the holder record (distlock::Holder), optional.
--
-- Returns {1, token}  taken (we were first in line, or nobody waits), or our own holding
--                     confirmed (same token, lease restarts).
--         {0, ms}     not our turn: with ARGV[5] = '1' we are in the queue (appended on the
--                     first such call, deadline refreshed on every call); ms = how long until we should ask again, never
--                     more than a third of the waiter ttl so our place does not lapse while we
--                     live.
-- Invariants: a waiter whose deadline passed (it crashed, or gave up without abandon) is
-- removed before anyone is judged, so it blocks the others for at most one waiter ttl. When the
-- head of the queue changes while the lock is free, the new head is told on the channel by the
-- SHA-1 of its owner token (never the token itself, which would let listeners release the lock).
local owner = ARGV[1]
local waiter_ttl = tonumber(ARGV[3])
local now = now_ms()

local stale = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
for _, gone in ipairs(stale) do
  redis.call('LREM', KEYS[3], 0, gone)
  redis.call('ZREM', KEYS[4], gone)
end

local held = redis.call('EXISTS', KEYS[1]) == 1
if held and redis.call('HEXISTS', KEYS[1], owner) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[1], '#fence'))}
end

local head = redis.call('LINDEX', KEYS[3], 0)
if not held then
  if (not head) or head == owner then
    if head then
      redis.call('LPOP', KEYS[3])
      redis.call('ZREM', KEYS[4], owner)
    end
    local token = next_fence(KEYS[2])
    redis.call('HSET', KEYS[1], owner, 1, '#fence', string.format('%.0f', token))
    local took = took_at(now, ARGV[6])
    if took then
      redis.call('HSET', KEYS[1], '#took', took)
    end
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, token}
  end
  if #stale > 0 then
    redis.call('PUBLISH', ARGV[4], redis.sha1hex(head))
  end
end

if ARGV[5] == '1' then
  if not redis.call('ZSCORE', KEYS[4], owner) then
    redis.call('RPUSH', KEYS[3], owner)
  end
  redis.call('ZADD', KEYS[4], now + waiter_ttl, owner)
  redis.call('PEXPIRE', KEYS[3], waiter_ttl * 2)
  redis.call('PEXPIRE', KEYS[4], waiter_ttl * 2)
  if not head then
    head = owner
  end
end

local wait = waiter_ttl
if held then
  wait = redis.call('PTTL', KEYS[1])
elseif head then
  wait = tonumber(redis.call('ZSCORE', KEYS[4], head)) - now
end
wait = math.min(wait, math.floor(waiter_ttl / 3))
return {0, math.max(wait, 1)}
