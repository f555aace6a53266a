-- Forced release of a lease lock, one statement (one transaction): ends whatever holding the
-- row has, whoever holds it, and advances the fencing counter into the row, so the next take
-- (which draws from the sequence again) is above it and above the removed holding. The row
-- stays, like after a release (its row lock orders takers). The old holder's next renewal finds
-- its token gone (extend.sql matches no row) and its lost() fires. Waiters are told as by a
-- release (NOTIFY distlock_released, delivered at commit).
-- $1 name
-- returns one row: the removed live holding's token, holder record, since (Unix ms), lease left
--   (ms) — all NULL when the lock was free — then the fencing counter after the advance (drawn
--   from the sequence when the name has no row yet).
-- `old` locks the row before the update reads it, so the holding reported is the one removed.
WITH old AS (
    SELECT name, token, holder, taken_at, expires_at,
           holds > 0 AND expires_at > now() AS live
    FROM distlock_locks WHERE name = $1
    FOR UPDATE
), forced AS (
    UPDATE distlock_locks AS l
    SET holds = 0, expires_at = 'epoch'::timestamptz, token = nextval('distlock_fencing'),
        holder = NULL, taken_at = NULL
    FROM old WHERE l.name = old.name
    RETURNING l.token AS fence
), told AS (
    SELECT pg_notify('distlock_released', $1) FROM old WHERE old.live
)
SELECT o.token, o.holder,
       floor(EXTRACT(EPOCH FROM o.taken_at) * 1000)::bigint AS since_ms,
       ceil(EXTRACT(EPOCH FROM (o.expires_at - now())) * 1000)::bigint AS left_ms,
       COALESCE((SELECT fence FROM forced), nextval('distlock_fencing')) AS fence
FROM (SELECT count(*) AS notified FROM told) AS n
LEFT JOIN old AS o ON o.live
