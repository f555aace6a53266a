-- raise_fence.lua: on one Redlock master, raise the lock's fencing counter to the token an
-- acquisition chose (the largest its winning masters drew), and make that master's share of the
-- holding carry that token, so extend and release name the holding by one token on every master.
--
-- KEYS[1]  the lock, '<owner>:<token>[record][+]' (see the Redis backend's acquire.lua).
-- KEYS[2]  the lock's fencing counter (see prelude.lua).
-- ARGV[1]  owner token.
-- ARGV[2]  the token this master drew for the holding, or '' when this master holds no share
--          of it (the counter is only raised: it lagged behind the others).
-- ARGV[3]  the chosen token (>= every token this acquisition drew).
--
-- Returns 1  the counter is at least ARGV[3] now and, when ARGV[2] is given, this master's
--            share is still the owner's and carries ARGV[3];
--         0  the share named by ARGV[2] is gone (its lease ended): nothing but the counter moved.
-- Invariant: the counter never goes down. Raising it on a majority while the holding's shares
-- are still there means every later acquisition, whose majority meets this one in at least one
-- master, draws a larger token there (see docs.md, "Fencing tokens").
local chosen = tonumber(ARGV[3])
if tonumber(redis.call('GET', KEYS[2]) or '0') < chosen then
  redis.call('SET', KEYS[2], ARGV[3], 'PX', FENCE_TTL_MS)
end
if ARGV[2] == '' then
  return 1
end
local held = redis.call('GET', KEYS[1])
local token = holding_token(held, ARGV[1])
if token and (token == ARGV[2] or token == ARGV[3]) then
  -- Keep what follows the token (the holder record, a waiter's '+' mark) as it is.
  local rest = string.sub(held, #ARGV[1] + 2 + #token)
  redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[3] .. rest, 'KEEPTTL')
  return 1
end
return 0
