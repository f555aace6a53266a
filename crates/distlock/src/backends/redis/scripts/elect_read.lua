-- elect_read.lua: an election's live leader, or its log.
--
-- KEYS[1]  record (see elect_write.lua).
-- KEYS[2]  alive (see elect_write.lua).
-- KEYS[3]  log (see elect_write.lua).
-- ARGV[1]  'current': the live leader; 'latest': the latest entry, live or not; otherwise a
--          seq: the entries after it.
--
-- Returns a list of entries "seq:term:has:value", oldest first ('current': at most one, with
-- has '1', only while the alive key stands for the latest entry). Read-only.
local function latest()
    local rec = redis.call('HMGET', KEYS[1], 'seq', 'term', 'has', 'value')
    if not rec[1] then
        return nil, nil
    end
    return rec[1] .. ':' .. rec[2] .. ':' .. rec[3] .. ':' .. (rec[4] or ''), rec
end
if ARGV[1] == 'current' then
    local entry, rec = latest()
    if not entry or rec[3] ~= '1' or redis.call('GET', KEYS[2]) ~= rec[1] then
        return {}
    end
    return {entry}
elseif ARGV[1] == 'latest' then
    local entry = latest()
    if not entry then
        return {}
    end
    return {entry}
end
return redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. ARGV[1], '+inf')
