-- Forced release of a lease lock, step 1 of one transaction: locks the name's row and reads the
-- live holding it is about to end (force_advance.sql follows, then commit).
-- params: name (bytes)
-- returns: the holding's token, holder record, since (Unix ms), lease left (ms), and 1 if it
--   is live (0: released or expired, nothing to report); no row when the name was never used.
SELECT CAST(token AS SIGNED) AS token,
       holder,
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', taken_at) DIV 1000 AS SIGNED)
           AS since_ms,
       CAST((TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) + 999) DIV 1000 AS SIGNED)
           AS left_ms,
       CAST(holds > 0 AND expires_at > UTC_TIMESTAMP(6) AS SIGNED) AS live
FROM distlock_locks WHERE name = ?
FOR UPDATE
