-- distlock's tables in MySQL / MariaDB (InnoDB). Idempotent: run by every client at connect.
--
-- distlock_locks: one row per lock name ever used; a released lock keeps its row (holds = 0,
--   expiry in the past) so that its fencing counter lives on.
--   name        the lock name, byte for byte: VARBINARY, so no collation folds case or ignores
--               trailing spaces (bound, never concatenated)
--   owner       the holder's secret owner token (32 hex digits), or the last holder's
--   holds       1 while held, 0 once released (re-entry is counted by the holding client)
--   token       fencing token of the current (or last) holding: the counter, bumped when a new
--               holder takes the row
--   expires_at  when the lease ends, UTC, by the server's clock (UTC_TIMESTAMP(6))
-- distlock_session_tokens: the fencing counter of session (GET_LOCK) locks, one row per name.
-- distlock_row_locks: one row per name used with the row-lock API (SELECT … FOR UPDATE in the
--   caller's transaction).
CREATE TABLE IF NOT EXISTS distlock_locks (
    name       VARBINARY(512) NOT NULL PRIMARY KEY,
    owner      CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    holds      INT UNSIGNED NOT NULL,
    token      BIGINT UNSIGNED NOT NULL,
    expires_at DATETIME(6) NOT NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS distlock_session_tokens (
    name  VARBINARY(512) NOT NULL PRIMARY KEY,
    token BIGINT UNSIGNED NOT NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS distlock_row_locks (
    name VARBINARY(512) NOT NULL PRIMARY KEY
) ENGINE = InnoDB;
