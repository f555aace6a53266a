-- Forced release of a session (advisory) lock, one statement (one transaction): draws the
-- fence from the sequence first, then ends the session of the connection holding the name's
-- advisory lock (pg_terminate_backend, waiting up to 5 s for it to exit, which frees the lock)
-- and deletes its record; waiters are told as by a release (NOTIFY, delivered at commit). The
-- old holder's connection ends, so its lost() fires; every later take draws above the fence.
-- Needs the right to signal the holder's backend (superuser, pg_signal_backend, or the same
-- role); without it the statement fails and nothing changes.
-- $1 name
-- returns one row: the removed holding's token, holder record, since (Unix ms), NULL (no
--   lease) — all NULL when nobody held the lock (or its record was not written yet) — then
--   the fence.
-- `ended` scans `fence`, so the fence is drawn before any session is ended: a new holder can
-- only draw its token after the old one's session is gone.
WITH fence AS (
    SELECT nextval('distlock_fencing') AS token
), key AS (
    SELECT hashtextextended($1, 7306915764203548012) AS k
), held AS (
    SELECT l.pid FROM pg_locks AS l, key
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = ((key.k >> 32) & 4294967295)::oid
      AND l.objid = (key.k & 4294967295)::oid
), removed AS (
    DELETE FROM distlock_sessions WHERE name = $1
    RETURNING token, holder, taken_at, pid
), ended AS (
    SELECT pg_terminate_backend(held.pid, 5000) AS ok, pg_notify('distlock_released', $1)
    FROM fence, held
)
SELECT r.token, r.holder,
       floor(EXTRACT(EPOCH FROM r.taken_at) * 1000)::bigint AS since_ms,
       NULL::bigint AS left_ms,
       (SELECT token FROM fence) AS fence
FROM (SELECT count(*) AS terminated FROM ended) AS e
LEFT JOIN removed AS r ON r.pid IN (SELECT pid FROM held)
