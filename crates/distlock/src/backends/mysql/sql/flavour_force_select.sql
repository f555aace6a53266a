-- Forced release, step 1 (under flavour_lock.sql's lock): the live holdings of one side it is
-- about to remove (flavour_force_delete.sql and flavour_next_token.sql follow).
-- params: family, name (bytes), side
-- returns: token, holder record, since (Unix ms), lease left (ms)
SELECT CAST(token AS SIGNED), holder,
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', taken_at) DIV 1000 AS SIGNED),
       CAST((TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) + 999) DIV 1000 AS SIGNED)
FROM distlock_holdings
WHERE family = ? AND name = ? AND side = ? AND expires_at > UTC_TIMESTAMP(6)
