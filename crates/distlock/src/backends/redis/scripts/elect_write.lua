-- elect_write.lua: writes an election's record, fenced by its term.
--
-- KEYS[1]  record: hash {seq, term, has, value} — the latest log entry and the largest term
--          ever written (`has` is '1' while a leader's value stands, '0' once it resigned).
-- KEYS[2]  alive: the latest entry's seq, with a TTL: the record lapses when it expires.
-- KEYS[3]  log: sorted set scored by seq, members "seq:term:has:value".
-- ARGV[1]  term (decimal, below 2^53).
-- ARGV[2]  '1' to write a value, '0' to end the term (resign).
-- ARGV[3]  the value ('' when ending the term).
-- ARGV[4]  TTL in ms.
-- ARGV[5]  the channel watchers listen on.
-- ARGV[6]  how many log entries to keep.
--
-- Returns 1 if written, 0 (nothing changed) if a larger term was written before.
-- Invariants: the stored term never decreases; a new entry (published with '*', which wakes
-- every watcher of the channel) only when (term, has, value) differ from the latest one, so a
-- refresh appends nothing; log seqs are 1, 2, 3, … per election.
local term = tonumber(ARGV[1])
local rec = redis.call('HMGET', KEYS[1], 'seq', 'term', 'has', 'value')
local seq = tonumber(rec[1]) or 0
local max = tonumber(rec[2])
if max and term < max then
    return 0
end
local changed = (not max) or term > max or rec[3] ~= ARGV[2]
    or (ARGV[2] == '1' and rec[4] ~= ARGV[3])
if changed then
    seq = seq + 1
    redis.call('HSET', KEYS[1], 'seq', seq, 'term', ARGV[1], 'has', ARGV[2], 'value', ARGV[3])
    redis.call('ZADD', KEYS[3], seq, seq .. ':' .. ARGV[1] .. ':' .. ARGV[2] .. ':' .. ARGV[3])
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', seq - tonumber(ARGV[6]))
    redis.call('PUBLISH', ARGV[5], '*')
end
if ARGV[2] == '1' then
    redis.call('SET', KEYS[2], seq, 'PX', ARGV[4])
else
    redis.call('DEL', KEYS[2])
end
return 1
