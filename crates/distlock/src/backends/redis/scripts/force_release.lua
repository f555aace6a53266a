-- force_release.lua: remove every holding of one flavour of a lock, whoever holds it, and advance
-- its fencing counter, in one step (`distlock` operations: a wedged holder).
--
-- KEYS     the family's keys, the fencing counter last (see holdings.lua).
-- ARGV[1]  the family: 'lock', 'fair', 'rw' or 'sem'; ARGV[2] for 'rw', the side removed: 'w'
--          the writer, 'r' every reader; ARGV[3] the lock's channel.
--
-- Returns {the counter after it moved, waiters ('' if not kept), the removed holdings...} (five
-- strings per holding, see holdings.lua).
-- Guarantees: the counter moves even when nothing was held, so every later take draws a token
-- above it and above every removed holding's; a removed holder's next extend finds nothing and
-- answers 0 (its lost() fires). Waiters keep their places (queue, waiting writers) and are told
-- the lock is free as a release tells them.
local family, side = ARGV[1], ARGV[2]
local found, waiters = holdings(family, now_ms())
local reply = {'', waiters}
for i = 1, #found, 5 do
  if family ~= 'rw' or found[i] == side then
    for j = i, i + 4 do
      reply[#reply + 1] = found[j]
    end
  end
end
if family == 'lock' then
  redis.call('DEL', KEYS[1])
  if #reply > 2 then
    redis.call('PUBLISH', ARGV[3], '')
  end
elseif family == 'fair' then
  redis.call('DEL', KEYS[1])
  local head = redis.call('LINDEX', KEYS[2], 0)
  if head then
    redis.call('PUBLISH', ARGV[3], redis.sha1hex(head))
  end
elseif family == 'rw' then
  if side == 'w' then
    redis.call('DEL', KEYS[1])
  else
    redis.call('DEL', KEYS[2], KEYS[3])
  end
  -- '*': every waiter may go (all readers, or the first writer).
  redis.call('PUBLISH', ARGV[3], '*')
else
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('PUBLISH', ARGV[3], '*')
end
reply[1] = string.format('%.0f', next_fence(KEYS[#KEYS]))
return reply
