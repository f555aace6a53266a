-- The tables of leader election and the count-down latch in MySQL / MariaDB (InnoDB).
-- Idempotent: run by every client at connect, after schema.sql.
--
-- distlock_elections: one row per election, created empty (seq 0, term 0) by its first write.
--   name        the election's name, byte for byte (VARBINARY)
--   seq         the latest entry's number in distlock_election_log (0: none yet)
--   term        the largest term ever written (a fencing token of the election's lock); never
--               decreases, so a deposed leader's write (a smaller term) is refused
--   value       the latest entry's value; NULL once its leader resigned
--   expires_at  when the record lapses unless the leader refreshes it, UTC, server clock
-- distlock_election_log: the last entries per election (older ones are deleted), read by
--   observers so they see every term in order.
-- distlock_latches: one row per latch, its count (never below 0).
-- MySQL cannot notify a client: observers and latch waiters poll (see docs.md).
CREATE TABLE IF NOT EXISTS distlock_elections (
    name       VARBINARY(512) NOT NULL PRIMARY KEY,
    seq        BIGINT UNSIGNED NOT NULL,
    term       BIGINT UNSIGNED NOT NULL,
    value      MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    expires_at DATETIME(6) NOT NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS distlock_election_log (
    name  VARBINARY(512) NOT NULL,
    seq   BIGINT UNSIGNED NOT NULL,
    term  BIGINT UNSIGNED NOT NULL,
    value MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    PRIMARY KEY (name, seq)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS distlock_latches (
    name  VARBINARY(512) NOT NULL PRIMARY KEY,
    count BIGINT UNSIGNED NOT NULL
) ENGINE = InnoDB;
