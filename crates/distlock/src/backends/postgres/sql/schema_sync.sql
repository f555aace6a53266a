-- The tables of leader election and the count-down latch in PostgreSQL. Idempotent: run by
-- every client at connect, after schema.sql, under the same advisory lock (see there).
--
-- distlock_elections: one row per election, created empty (seq 0, term 0) by its first write.
--   name        the election's name, byte for byte ("C" collation)
--   seq         the latest entry's number in distlock_election_log (0: none yet)
--   term        the largest term ever written (a fencing token of the election's lock); never
--               decreases, so a deposed leader's write (a smaller term) is refused
--   value       the latest entry's value; NULL once its leader resigned
--   expires_at  when the record lapses unless the leader refreshes it (server clock)
-- distlock_election_log: the last entries per election (older ones are deleted), read by
--   observers so they see every term in order.
-- distlock_latches: one row per latch, its count (never below 0).
-- Changes are announced with pg_notify('distlock_changed', 'e:' || name) (an election entry)
-- and ('l:' || name) (a latch reached 0), in the writing transaction.
SELECT pg_advisory_xact_lock(7235441220220052331);
CREATE TABLE IF NOT EXISTS distlock_elections (
    name       text COLLATE "C" PRIMARY KEY,
    seq        bigint NOT NULL,
    term       bigint NOT NULL,
    value      text,
    expires_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS distlock_election_log (
    name  text COLLATE "C" NOT NULL,
    seq   bigint NOT NULL,
    term  bigint NOT NULL,
    value text,
    PRIMARY KEY (name, seq)
);
CREATE TABLE IF NOT EXISTS distlock_latches (
    name  text COLLATE "C" PRIMARY KEY,
    count bigint NOT NULL CHECK (count >= 0)
);
