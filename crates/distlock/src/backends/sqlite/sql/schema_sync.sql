-- The tables of leader election and the count-down latch. Idempotent: run by every client at
-- connect, after schema.sql.
--
-- distlock_elections: one row per election, its latest log entry and the largest term written.
--   name        the election's name, byte for byte
--   seq         the latest entry's number in distlock_election_log (1, 2, 3, …)
--   term        the largest term ever written (the leader's fencing token); never decreases, so a
--               deposed leader's write (a smaller term) is refused
--   value       the latest entry's value; NULL once its leader resigned
--   boot_id     the kernel boot expires_ms counts in (see schema.sql)
--   expires_ms  CLOCK_BOOTTIME in ms when the record lapses unless the leader refreshes it
-- distlock_election_log: the last entries per election (older ones are deleted), read by
--   observers so they see every term in order.
-- distlock_latches: one row per latch, its count (never below 0).
CREATE TABLE IF NOT EXISTS distlock_elections (
    name       TEXT PRIMARY KEY NOT NULL,
    seq        INTEGER NOT NULL,
    term       INTEGER NOT NULL,
    value      TEXT,
    boot_id    TEXT NOT NULL,
    expires_ms INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS distlock_election_log (
    name  TEXT NOT NULL,
    seq   INTEGER NOT NULL,
    term  INTEGER NOT NULL,
    value TEXT,
    PRIMARY KEY (name, seq)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS distlock_latches (
    name  TEXT PRIMARY KEY NOT NULL,
    count INTEGER NOT NULL CHECK (count >= 0)
) WITHOUT ROWID;
