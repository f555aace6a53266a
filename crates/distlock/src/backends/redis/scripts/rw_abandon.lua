-- rw_abandon.lua: a waiting writer gives up and stops holding readers back.
--
-- KEYS[1] waiting writers (see rw_acquire.lua).
-- ARGV[1] owner token; ARGV[2] the lock's channel.
--
-- Returns 1 if the owner was waiting, 0 if not. When the last waiting writer leaves, '*' is
-- published: readers held back by writer preference may all go.
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if removed == 1 and redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('PUBLISH', ARGV[2], '*')
end
return removed
