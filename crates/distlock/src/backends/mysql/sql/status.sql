-- The live lease holdings of the locks selected (`distlock status`): the one named by the first
-- two params, or, when they are NULL, every one whose name starts with the prefix (LEFT and
-- LENGTH both count bytes of the VARBINARY name and the bound bytes, so no LIKE wildcard needs
-- escaping).
-- params, in order: name or NULL, the same again, prefix, the same again (both as bytes)
-- returns: name, token, holder record, since (Unix ms), lease left (ms, server clock), last
--   token (the name's counter is the row's token: the next new holding bumps it).
-- taken_at and expires_at are UTC: TIMESTAMPDIFF from the epoch, not UNIX_TIMESTAMP, which
-- would read them in the session's time zone.
SELECT CONVERT(name USING utf8mb4) AS name,
       CAST(token AS SIGNED) AS token,
       holder,
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', taken_at) DIV 1000 AS SIGNED)
           AS since_ms,
       CAST((TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) + 999) DIV 1000 AS SIGNED)
           AS left_ms,
       CAST(token AS SIGNED) AS last_token
FROM distlock_locks
WHERE (name = ? OR (? IS NULL AND LEFT(name, LENGTH(?)) = ?))
  AND holds > 0 AND expires_at > UTC_TIMESTAMP(6)
ORDER BY name
