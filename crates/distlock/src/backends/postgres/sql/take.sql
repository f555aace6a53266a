-- Takes, re-enters or reports a lease lock in one statement.
-- $1 name, $2 owner, $3 lease in milliseconds
-- returns one row: (token, NULL) when the caller holds the lock now, (NULL, ms the holder's lease
--   has left) when someone else does. The second part reads this statement's snapshot, which
--   may predate the holder that blocked the upsert: then it shows no row, or a released or
--   expired one, and says NULL (unknown) rather than 0, so the waiter sleeps until notified.
-- Invariants: the row is overwritten only when it is the caller's or its lease has ended, judged
--   by now() (the server's clock, one for every client). A re-entry (same owner, lease not over)
--   keeps the token and adds one hold. A new holding draws its token in the DO UPDATE branch,
--   i.e. after this statement got the row lock, so it is larger than the token of every holder
--   before it. The token in VALUES is used only by the very first take of a name (no row yet,
--   so no earlier holder); rows are never deleted, so that case happens once per name.
WITH taken AS (
    INSERT INTO distlock_locks AS l (name, owner, holds, token, expires_at)
    VALUES ($1, $2, 1, nextval('distlock_fencing'), now() + $3 * interval '1 millisecond')
    ON CONFLICT (name) DO UPDATE SET
        holds = CASE WHEN l.expires_at > now() THEN l.holds + 1 ELSE 1 END,
        token = CASE WHEN l.expires_at > now() THEN l.token ELSE nextval('distlock_fencing') END,
        owner = excluded.owner,
        expires_at = excluded.expires_at
    WHERE l.owner = excluded.owner OR l.expires_at <= now()
    RETURNING l.token
)
SELECT token, NULL::bigint AS left_ms FROM taken
UNION ALL
SELECT NULL::bigint,
       CASE WHEN expires_at > now()
            THEN CEIL(EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint END
FROM distlock_locks
WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM taken)
