-- A synchronizer's line of waiters, first come first (live: the step purged first).
-- params: family, name (bytes)
-- returns: owner, how long its place lasts (ms, server clock)
SELECT owner,
       CAST((TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) + 999) DIV 1000 AS SIGNED)
FROM distlock_waiters WHERE family = ? AND name = ?
ORDER BY seq
