-- Forced release of a session (advisory) lock, one statement (one transaction): advances the
-- name's fencing counter first (the token in its distlock_sessions row, to GREATEST(token + 1,
-- the server clock in µs); a name without a row gets one at the clock) and clears the holding's
-- record in it (pid 0, which no backend has, so status shows nothing), then ends the session of
-- the connection holding the name's advisory lock (pg_terminate_backend, waiting up to 5 s for
-- it to exit, which frees the lock); waiters are told as by a release (NOTIFY, delivered at
-- commit). The old holder's connection ends, so its lost() fires. A new holder's take writes
-- the same row, so it waits for this statement's commit and draws above the fence. The row is
-- kept, not deleted: it is the name's memory of its last token.
-- Needs the right to signal the holder's backend (superuser, pg_signal_backend, or the same
-- role); without it the statement fails and nothing changes.
-- $1 name
-- returns one row: the removed holding's token, holder record, since (Unix ms), NULL (no
--   lease) — all NULL when nobody held the lock (or its record was not written yet) — then
--   the fence.
-- `ended` scans `fence`, so the counter row is locked and advanced before any session is
-- ended: a new holder can only draw its token after this commits. `old` locks and reads the
-- record before the advance clears it: the upsert's source row is `old` counted, so `old` is
-- read to the end first (a locking read after this statement's own change would skip the row).
WITH key AS (
    SELECT hashtextextended($1, 7306915764203548012) AS k
), held AS (
    SELECT l.pid FROM pg_locks AS l, key
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = ((key.k >> 32) & 4294967295)::oid
      AND l.objid = (key.k & 4294967295)::oid
), old AS (
    SELECT token, holder, taken_at, pid FROM distlock_sessions WHERE name = $1
    FOR UPDATE
), fence AS (
    INSERT INTO distlock_sessions AS s (name, token, pid, holder, taken_at)
    SELECT $1, floor(EXTRACT(EPOCH FROM now()) * 1000000)::bigint, 0, NULL, now()
    FROM (SELECT count(*) FROM old) AS old_read_first
    ON CONFLICT (name) DO UPDATE SET
        token = GREATEST(s.token + 1, excluded.token), pid = 0, holder = NULL,
        taken_at = excluded.taken_at
    RETURNING token
), ended AS (
    SELECT pg_terminate_backend(held.pid, 5000) AS ok, pg_notify('distlock_released', $1)
    FROM fence, held
)
SELECT r.token, r.holder,
       floor(EXTRACT(EPOCH FROM r.taken_at) * 1000)::bigint AS since_ms,
       NULL::bigint AS left_ms,
       (SELECT token FROM fence) AS fence
FROM (SELECT count(*) AS terminated FROM ended) AS e
LEFT JOIN old AS r ON r.pid IN (SELECT pid FROM held)
