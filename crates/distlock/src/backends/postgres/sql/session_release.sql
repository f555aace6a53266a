-- Session lock: frees the advisory lock of a name held by this connection and tells waiters.
-- $1 name
-- returns: true if this connection held it (false: it did not; nothing changed, nobody told).
-- CASE, not AND: the notice must only go out when the unlock happened.
SELECT CASE WHEN pg_advisory_unlock(hashtextextended($1, 7306915764203548012))
            THEN pg_notify('distlock_released', $1) IS NOT NULL
            ELSE false END AS released
