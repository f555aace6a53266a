-- fence_write.lua: a fenced write (crate::fence::RedisFence): the write happens only if the
-- caller's fencing token is above the last one the resource's fence accepted, and the fence is
-- raised to it in the same step. Runs alone (no prelude): it touches no lock keys.
--
-- KEYS[1]  the resource's fence key: the last accepted token, as a decimal string; no expiry
--          (a fence that vanished would let an old token in again).
-- KEYS[2]  the data key written to.
-- ARGV[1]  the caller's fencing token, decimal (below 2^53: Lua numbers are doubles).
-- ARGV[2]  the write: 'SET' (ARGV[3] value), 'HSET' (ARGV[3] field, ARGV[4] value) or
--          'INCRBY' (ARGV[3] delta).
--
-- Returns {1, reply} when accepted: reply is 1 for SET, HSET's and INCRBY's own reply.
--         {0, last}  when refused (token <= last accepted): nothing is written.
-- Invariant: the fence only grows. The write runs before the fence is raised, so a write that
-- fails (WRONGTYPE, …) aborts the script with the fence unchanged.
local token = tonumber(ARGV[1])
local last = redis.call('GET', KEYS[1])
if last and tonumber(last) >= token then
  return {0, last}
end

local op = ARGV[2]
local reply
if op == 'SET' then
  redis.call('SET', KEYS[2], ARGV[3])
  reply = 1
elseif op == 'HSET' then
  reply = redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
elseif op == 'INCRBY' then
  reply = redis.call('INCRBY', KEYS[2], ARGV[3])
else
  return redis.error_reply('fence_write.lua: unknown write ' .. tostring(op))
end
redis.call('SET', KEYS[1], ARGV[1])
return {1, reply}
