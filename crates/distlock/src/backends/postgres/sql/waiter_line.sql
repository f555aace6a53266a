-- A synchronizer's line of waiters, first come first (live: the step purged first).
-- $1 family, $2 name
-- returns: owner, how long its place lasts (ms, server clock)
SELECT owner, ceil(EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint
FROM distlock_waiters WHERE family = $1 AND name = $2
ORDER BY seq
