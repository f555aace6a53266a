-- A synchronizer's holdings (live: the step purged first).
-- params: family, name (bytes)
-- returns: side, owner, token, lease left (ms, server clock)
SELECT side, owner, CAST(token AS SIGNED),
       CAST((TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) + 999) DIV 1000 AS SIGNED)
FROM distlock_holdings WHERE family = ? AND name = ?
