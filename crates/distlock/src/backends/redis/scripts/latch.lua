-- latch.lua: the count-down latch's steps.
--
-- KEYS[1]  the count (a decimal string; missing means 0).
-- ARGV[1]  'set', 'down' or 'count'.
-- ARGV[2]  'set': the count (1 ..= 10^9); 'down': the channel waiters listen on.
--
-- Returns: 'set': 1 if set, 0 if a count was running (nothing changed); 'down': the count
-- after (never below 0; the step that reaches 0 publishes '*', which wakes every waiter of the
-- channel); 'count': the count.
-- Invariant: the count is never below 0 and only 'set' raises it, and only from 0.
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
if ARGV[1] == 'set' then
    if count > 0 then
        return 0
    end
    redis.call('SET', KEYS[1], ARGV[2])
    return 1
elseif ARGV[1] == 'down' then
    if count <= 0 then
        return 0
    end
    count = redis.call('DECR', KEYS[1])
    if count == 0 then
        redis.call('PUBLISH', ARGV[2], '*')
    end
    return count
end
return count
