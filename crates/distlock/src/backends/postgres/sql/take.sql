-- Takes, re-enters or reports a lease lock in one statement.
-- $1 name, $2 owner, $3 lease in milliseconds
-- returns one row: (token, NULL) when the caller holds the lock now, (NULL, ms the holder's lease
--   has left) when someone else does; no row at all in the rare case where another session
--   inserted the row after this statement's snapshot (the caller then treats the lock as held).
-- Invariants: the row is overwritten only when it is the caller's or its lease has ended, judged
--   by now() (the server's clock, one for every client). A new holding gets a fresh token from the
--   sequence; a re-entry (same owner, lease not over) keeps the token and adds one hold.
--   nextval() runs on every attempt, so held attempts burn sequence values: harmless, the
--   sequence is a bigint and only order matters.
WITH taken AS (
    INSERT INTO distlock_locks AS l (name, owner, holds, token, expires_at)
    VALUES ($1, $2, 1, nextval('distlock_fencing'), now() + $3 * interval '1 millisecond')
    ON CONFLICT (name) DO UPDATE SET
        holds = CASE WHEN l.expires_at > now() THEN l.holds + 1 ELSE 1 END,
        token = CASE WHEN l.expires_at > now() THEN l.token ELSE excluded.token END,
        owner = excluded.owner,
        expires_at = excluded.expires_at
    WHERE l.owner = excluded.owner OR l.expires_at <= now()
    RETURNING l.token
)
SELECT token, NULL::bigint AS left_ms FROM taken
UNION ALL
SELECT NULL::bigint,
       GREATEST(0, CEIL(EXTRACT(EPOCH FROM (expires_at - now())) * 1000))::bigint
FROM distlock_locks
WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM taken)
