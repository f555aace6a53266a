-- extend_many.lua: restart the leases of many exclusive locks in one call, each only for the
-- holding named, exactly as extend.lua does for one (the watchdog's batched renewals: one call
-- per round for up to a hundred holdings instead of one each).
--
-- KEYS[i]  the i-th lock (see acquire.lua).
-- ARGV[3i-2] its owner token; ARGV[3i-1] its lease in ms; ARGV[3i] its holding's fencing token.
--
-- Returns one answer per lock, in order: 1 if that holding is still its owner's (its lease now
-- restarts), 0 otherwise (the lease ended, someone else holds it, or it is a newer holding:
-- nothing is changed for it).
local renewed = {}
for i, key in ipairs(KEYS) do
  local owner, lease, token = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  if holding_token(redis.call('GET', key), owner) == token then
    redis.call('PEXPIRE', key, lease)
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
