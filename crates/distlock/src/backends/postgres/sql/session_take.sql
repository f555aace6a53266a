-- Session lock: tries the advisory lock of a name on the caller's dedicated connection and, if
-- it got it, draws a fencing token and records the holding (distlock_sessions: token, this
-- connection's pid, holder record, start) in the same statement, for `distlock status` and a
-- forced release on other connections.
-- $1 name, $2 the taker's holder record (distlock::Holder)
-- returns: the token, or NULL when another session holds the lock.
-- The advisory key is hashtextextended(name, seed): 64 bits, stable across PostgreSQL versions
-- (hash partitioning depends on it). Two names with the same key would exclude each other; see
-- docs.md for the odds. The token is GREATEST(the name's last token + 1, the server clock in
-- µs: excluded.token), drawn after the lock is taken, so it is larger than every token drawn by
-- earlier holders; a name without a row (new, or its row lost) starts at the clock (see
-- take.sql and docs.md for why that is above every token handed out before). Only the lock's
-- holder writes the name's row (and a forced release, which a new holder's write waits for), so
-- takers of the same name never wait for each other here.
WITH taken AS (
    SELECT true AS got WHERE pg_try_advisory_lock(hashtextextended($1, 7306915764203548012))
), recorded AS (
    INSERT INTO distlock_sessions AS s (name, token, pid, holder, taken_at)
    SELECT $1, floor(EXTRACT(EPOCH FROM now()) * 1000000)::bigint, pg_backend_pid(), $2, now()
    FROM taken
    ON CONFLICT (name) DO UPDATE SET
        token = GREATEST(s.token + 1, excluded.token), pid = excluded.pid,
        holder = excluded.holder, taken_at = excluded.taken_at
    RETURNING token
)
SELECT (SELECT token FROM recorded) AS token
