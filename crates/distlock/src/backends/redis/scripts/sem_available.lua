-- sem_available.lua: a semaphore's size and how many of its permits are held now.
--
-- KEYS[1]  holders (owner → lease end ms, see sem_acquire.lua); KEYS[2] the semaphore's size.
--
-- Returns {size (0: none kept yet), permits whose lease has not ended}. Read-only: expired
-- permits count as free without being purged.
local size = tonumber(redis.call('GET', KEYS[2])) or 0
return {size, redis.call('ZCOUNT', KEYS[1], '(' .. now_ms(), '+inf')}
