-- sem_available.lua: how many permits of a semaphore are free now.
--
-- KEYS[1]  holders (owner → lease end ms, see sem_acquire.lua).
-- ARGV[1]  permits in all.
--
-- Returns permits minus the permits whose lease has not ended (never below 0). Read-only:
-- expired permits count as free without being purged.
local live = redis.call('ZCOUNT', KEYS[1], '(' .. now_ms(), '+inf')
return math.max(tonumber(ARGV[1]) - live, 0)
