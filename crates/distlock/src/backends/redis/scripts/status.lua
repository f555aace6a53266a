-- status.lua: the holdings of one lock family as they are now (read only; see holdings.lua).
--
-- KEYS     the family's keys, the fencing counter last (see holdings.lua).
-- ARGV[1]  the family: 'lock', 'fair', 'rw' or 'sem'.
--
-- Returns {last token ('' if the counter is gone), waiters ('' if not kept), holdings...}: every
-- string, five per holding (see holdings.lua).
local found, waiters = holdings(ARGV[1], now_ms())
local reply = {redis.call('GET', KEYS[#KEYS]) or '', waiters}
for _, v in ipairs(found) do
  reply[#reply + 1] = v
end
return reply
