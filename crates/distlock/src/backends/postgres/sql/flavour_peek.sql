-- A synchronizer as the statement's snapshot shows it, without locking or writing anything:
-- a waiter whose take this shows blocked answers "held" at once (see flavours.rs), so a crowd
-- of woken waiters does not queue on the synchronizer's row lock. The snapshot only ever
-- skips a take that the locked step would also refuse, or one racing a release that commits
-- after it, whose notice then wakes the waiter again.
-- $1 family, $2 name
-- returns rows of (what, side, owner, number, left_ms):
--   ('h', side, owner, token, lease left ms)   each live holding
--   ('w', NULL, owner, seq, place left ms)      each live place in line, by seq
--   ('s', NULL, NULL, permits, NULL)            the synchronizer's row (permits may be NULL)
SELECT 'h' AS what, side, owner, token AS number,
       ceil(EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint AS left_ms
FROM distlock_holdings WHERE family = $1 AND name = $2 AND expires_at > now()
UNION ALL
SELECT 'w', NULL, owner, seq, ceil(EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint
FROM distlock_waiters WHERE family = $1 AND name = $2 AND expires_at > now()
UNION ALL
SELECT 's', NULL, NULL, permits::bigint, NULL
FROM distlock_flavours WHERE family = $1 AND name = $2
ORDER BY 1, 4
