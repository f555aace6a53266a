-- Forced release of a session lock, step 1 of one transaction: locks the name's counter row
-- (a new holder's token draw waits for the commit, so it lands above the fence) and reads the
-- recorded holding and the connection that holds the lock now.
-- params: name (bytes)
-- returns: token, holder record, since (Unix ms), NULL (no lease), the recording connection's
--   id, and the id
--   IS_USED_LOCK answers (NULL: nobody holds the lock); no row when the name was never taken.
--   The record is the holding only when the two ids agree.
SELECT CAST(token AS SIGNED) AS token,
       holder,
       CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', taken_at) DIV 1000 AS SIGNED)
           AS since_ms,
       CAST(NULL AS SIGNED) AS left_ms,
       CAST(conn_id AS SIGNED) AS conn_id,
       CAST(IS_USED_LOCK(CONCAT('distlock:', LEFT(SHA2(name, 256), 55))) AS SIGNED) AS holding
FROM distlock_session_tokens WHERE name = ?
FOR UPDATE
