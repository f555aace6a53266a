-- Session lock: tries the advisory lock of a name on the caller's dedicated connection and, if
-- it got it, draws a fencing token in the same statement.
-- $1 name
-- returns: the token, or NULL when another session holds the lock.
-- The advisory key is hashtextextended(name, seed): 64 bits, stable across PostgreSQL versions
-- (hash partitioning depends on it). Two names with the same key would exclude each other; see
-- docs.md for the odds. The token is drawn after the lock is taken, so it is larger than every
-- token drawn by earlier holders.
SELECT CASE WHEN pg_try_advisory_lock(hashtextextended($1, 7306915764203548012))
            THEN nextval('distlock_fencing') END AS token
