-- The live holdings of the fair locks, read-write locks and semaphores selected: named by the
-- first two params, or, when they are NULL, every one whose name starts with the prefix (as
-- status.sql).
-- params, in order: name or NULL, the same again, prefix, the same again (both as bytes)
-- returns: name, side, token, holder record, since (Unix ms), lease left (ms), last token,
--   permits (a semaphore's size, else NULL); ordered by name, side, token
SELECT CONVERT(h.name USING utf8mb4), h.side, CAST(h.token AS SIGNED), h.holder,
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', h.taken_at) DIV 1000 AS SIGNED),
       CAST((TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), h.expires_at) + 999) DIV 1000
            AS SIGNED),
       CAST(f.token AS SIGNED), CAST(f.permits AS SIGNED)
FROM distlock_holdings AS h
JOIN distlock_flavours AS f ON f.family = h.family AND f.name = h.name
WHERE (h.name = ? OR (? IS NULL AND LEFT(h.name, LENGTH(?)) = ?))
  AND h.expires_at > UTC_TIMESTAMP(6)
ORDER BY h.name, h.side, h.token
