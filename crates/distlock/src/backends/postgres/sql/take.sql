-- Takes a lease lock, confirms the caller's own holding, or reports it held, in one statement.
-- $1 name, $2 owner, $3 lease in milliseconds, $4 the taker's holder record (distlock::Holder)
-- returns one row: (token, NULL) when the caller holds the lock now, (NULL, ms the holder's lease
--   has left, or NULL if unknown) when someone else does. Rarely no row (the row appeared after
--   this statement's snapshot): the caller treats that as held.
-- Invariants: the row is overwritten only when it is the caller's or its lease has ended, judged
--   by now() (the server's clock, one for every client). The caller's own live holding (same
--   owner, lease not over) keeps its token and restarts its lease (re-entry is counted by the
--   client, so `holds` is 1 while held and 0 once released). A new holding's token is
--   GREATEST(the row's token + 1, the server clock in µs: excluded.token), drawn in the DO
--   UPDATE branch, i.e. after this statement got the row lock, so it is larger than the token
--   of every holder before it. The inserted row's token, the clock in µs (now(): the
--   transaction's start, one value all through the statement), is used only by the first take
--   of a name, or the first after its row was lost (deleted, or the table made anew): it is
--   above every token handed out before unless those ran ahead of the clock (more than one
--   take per µs) or the server's clock was set back (see docs.md).
-- Fast "held" answer: `current` reads the statement's snapshot; when it shows another owner's
--   live lease the INSERT is skipped, so a waiter's try locks nothing and writes nothing (an
--   ON CONFLICT DO UPDATE locks the row even when its WHERE fails, and that lock is a WAL
--   write and a commit flush). A new holding records its holder and start (taken_at); the
--   caller's re-take keeps them. The snapshot only ever skips a take that the locked check would
--   also refuse, or one racing a release that commits after it — whose NOTIFY then wakes us.
WITH current AS (
    SELECT owner, expires_at FROM distlock_locks WHERE name = $1
), taken AS (
    INSERT INTO distlock_locks AS l (name, owner, holds, token, expires_at, holder, taken_at)
    SELECT $1, $2, 1, floor(EXTRACT(EPOCH FROM now()) * 1000000)::bigint,
           now() + $3 * interval '1 millisecond', $4, now()
    WHERE NOT EXISTS (SELECT 1 FROM current WHERE owner <> $2 AND expires_at > now())
    ON CONFLICT (name) DO UPDATE SET
        holds = 1,
        token = CASE WHEN l.expires_at > now() THEN l.token
                     ELSE GREATEST(l.token + 1, excluded.token) END,
        holder = CASE WHEN l.expires_at > now() THEN l.holder ELSE excluded.holder END,
        taken_at = CASE WHEN l.expires_at > now() THEN l.taken_at ELSE excluded.taken_at END,
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
FROM current
WHERE NOT EXISTS (SELECT 1 FROM taken)
