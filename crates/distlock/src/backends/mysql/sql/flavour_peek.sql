-- A synchronizer as a plain (consistent, lock-free) read shows it: a waiter whose take this
-- shows blocked answers "held" at once (see flavours.rs), so polling waiters do not queue on
-- the synchronizer's row lock. The read only ever skips a take that the locked step would also
-- refuse, or one racing a release that commits after it, which the waiter's next poll sees.
-- params, in order: family, name (bytes), three times
-- returns rows of (what, side, owner, number, left_ms):
--   ('h', side, owner, token, lease left ms)   each live holding
--   ('w', NULL, owner, seq, place left ms)      each live place in line, by seq
--   ('s', NULL, NULL, permits, NULL)            the synchronizer's row (permits may be NULL)
SELECT 'h' AS what, side, owner, CAST(token AS SIGNED) AS number,
       CAST((TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) + 999) DIV 1000 AS SIGNED)
           AS left_ms
FROM distlock_holdings
WHERE family = ? AND name = ? AND expires_at > UTC_TIMESTAMP(6)
UNION ALL
SELECT 'w', NULL, owner, CAST(seq AS SIGNED),
       CAST((TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) + 999) DIV 1000 AS SIGNED)
FROM distlock_waiters
WHERE family = ? AND name = ? AND expires_at > UTC_TIMESTAMP(6)
UNION ALL
SELECT 's', NULL, NULL, CAST(permits AS SIGNED), NULL
FROM distlock_flavours WHERE family = ? AND name = ?
ORDER BY 1, 4
