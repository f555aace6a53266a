-- The live session (GET_LOCK) holdings of the locks selected (`distlock status`): a recorded
-- holding counts only while IS_USED_LOCK of the name's key answers the connection that
-- recorded it, so a released or killed holder's leftover record is not shown.
-- params, in order: name or NULL, the same again, prefix, the same again (both as bytes); see
--   status.sql for the prefix comparison and session_take.sql for the key.
-- returns: name, token, holder record, since (Unix ms), NULL (a session has no lease), last
--   token (the name's session counter: the holding's token).
SELECT CONVERT(name USING utf8mb4) AS name,
       CAST(token AS SIGNED) AS token,
       holder,
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', taken_at) DIV 1000 AS SIGNED)
           AS since_ms,
       CAST(NULL AS SIGNED) AS left_ms,
       CAST(token AS SIGNED) AS last_token
FROM distlock_session_tokens
WHERE (name = ? OR (? IS NULL AND LEFT(name, LENGTH(?)) = ?))
  AND conn_id IS NOT NULL
  AND IS_USED_LOCK(CONCAT('distlock:', LEFT(SHA2(name, 256), 55))) = conn_id
ORDER BY name
