-- sem_set_permits.lua: change a semaphore's size, whatever it was (Client::set_semaphore_permits).
--
-- KEYS[1]  the semaphore's size (see sem_acquire.lua).
-- ARGV[1]  the new size (at least 1); ARGV[2] the semaphore's channel.
--
-- Returns the size it had (0: none kept yet).
-- Holdings are untouched: after a shrink, permits beyond the new size stay held until released
-- (takes wait until fewer are held); after a growth, '*' on the channel wakes every waiter, as
-- the new permits may let several in.
local had = tonumber(redis.call('GET', KEYS[1])) or 0
redis.call('SET', KEYS[1], ARGV[1])
if tonumber(ARGV[1]) > had then
  redis.call('PUBLISH', ARGV[2], '*')
end
return had
