-- Forced release of a lease lock, one statement (one transaction): ends whatever holding the
-- row has, whoever holds it, and advances the name's fencing counter (the row's token) to
-- GREATEST(token + 1, the server clock in µs), so the next take, which draws above the row's
-- token, is above it and above the removed holding. A name without a row gets one, holding
-- nothing, with the counter at the clock in µs (the next take draws above that too). The row
-- stays, like after a release (its row lock orders takers). The old holder's next renewal finds
-- its token gone (extend.sql matches no row) and its lost() fires. Waiters are told as by a
-- release (NOTIFY distlock_released, delivered at commit).
-- $1 name
-- returns one row: the removed live holding's token, holder record, since (Unix ms), lease left
--   (ms) — all NULL when the lock was free — then the fencing counter after the advance.
-- `old` locks and reads the row (its latest version) before the upsert changes it: the upsert's
-- source row is `old` counted, so `old` is read to the end first (a locking read after this
-- statement's own change would skip the row), and the holding reported is the one removed.
WITH old AS (
    SELECT name, token, holder, taken_at, expires_at,
           holds > 0 AND expires_at > now() AS live
    FROM distlock_locks WHERE name = $1
    FOR UPDATE
), forced AS (
    INSERT INTO distlock_locks AS l (name, owner, holds, token, expires_at, holder, taken_at)
    SELECT $1, '', 0, floor(EXTRACT(EPOCH FROM now()) * 1000000)::bigint, 'epoch'::timestamptz,
           NULL, NULL
    FROM (SELECT count(*) FROM old) AS old_read_first
    ON CONFLICT (name) DO UPDATE SET
        holds = 0, expires_at = 'epoch'::timestamptz, token = GREATEST(l.token + 1, excluded.token),
        holder = NULL, taken_at = NULL
    RETURNING l.token AS fence
), told AS (
    SELECT pg_notify('distlock_released', $1) FROM old WHERE old.live
)
SELECT o.token, o.holder,
       floor(EXTRACT(EPOCH FROM o.taken_at) * 1000)::bigint AS since_ms,
       ceil(EXTRACT(EPOCH FROM (o.expires_at - now())) * 1000)::bigint AS left_ms,
       (SELECT fence FROM forced) AS fence
FROM (SELECT count(*) AS notified FROM told) AS n
LEFT JOIN old AS o ON o.live
