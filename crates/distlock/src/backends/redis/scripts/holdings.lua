-- holdings.lua: what status.lua and force_release.lua share (put after prelude.lua, before
-- either; not a script on its own).
--
-- KEYS are the lock's keys of one family, the fencing counter last (see keys.rs, `inspect`):
--   'lock'  the lock string, counter
--   'fair'  the lock hash, queue, waiters' deadlines, counter
--   'rw'    writer hash, readers, reader holds, waiting writers, counter
--   'sem'   holders, holds, counter
--
-- Defines:
--   holdings(family, now)  the live holdings as a flat list, five strings each:
--                          side ('w' the writer or an exclusive holding, 'r' a reader or a
--                          permit), fencing token, lease left in ms (server clock), taken at in
--                          server ms ('' unknown), holder record ('' unknown); and how many wait
--                          ('' where the store keeps no waiters). Owner tokens are never
--                          answered: they are the secret that releases a lock.

local function add_holding(out, side, token, left, took)
  if not token then
    return
  end
  local since, record = '', ''
  if took then
    since, record = string.match(took, '^(%d+)\t(.*)$')
  end
  out[#out + 1] = side
  out[#out + 1] = token
  out[#out + 1] = string.format('%d', math.max(left, 0))
  out[#out + 1] = since or ''
  out[#out + 1] = record or ''
end

-- Members of the sorted set `key` whose score (a lease end or a deadline) is after `now`.
local function live(key, now)
  return redis.call('ZRANGEBYSCORE', key, '(' .. now, '+inf', 'WITHSCORES')
end

local function holdings(family, now)
  local out = {}
  if family == 'lock' then
    local value = redis.call('GET', KEYS[1])
    if value then
      local token = string.match(value, '^[^:]*:(%d+)')
      local took = string.match(value, '^[^:]*:%d+\t([^\n]*)\n')
      add_holding(out, 'w', token, redis.call('PTTL', KEYS[1]), took)
    end
    return out, ''
  elseif family == 'fair' then
    local token = redis.call('HGET', KEYS[1], '#fence')
    if token then
      add_holding(out, 'w', token, redis.call('PTTL', KEYS[1]), redis.call('HGET', KEYS[1], '#took'))
    end
    return out, tostring(redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf'))
  elseif family == 'rw' then
    local writer = redis.call('HMGET', KEYS[1], 'w', 'wexp', 'wt', 'took')
    if writer[1] and tonumber(writer[2]) > now then
      add_holding(out, 'w', writer[3], tonumber(writer[2]) - now, writer[4])
    end
    local readers = live(KEYS[2], now)
    for i = 1, #readers, 2 do
      local owner = readers[i]
      local hold = redis.call('HMGET', KEYS[3], 't:' .. owner, 'h:' .. owner)
      add_holding(out, 'r', hold[1], tonumber(readers[i + 1]) - now, hold[2])
    end
    return out, tostring(redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf'))
  end
  local holders = live(KEYS[1], now)
  for i = 1, #holders, 2 do
    local owner = holders[i]
    local hold = redis.call('HMGET', KEYS[2], 't:' .. owner, 'h:' .. owner)
    add_holding(out, 'r', hold[1], tonumber(holders[i + 1]) - now, hold[2])
  end
  return out, ''
end
