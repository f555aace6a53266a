-- distlock's tables in MySQL / MariaDB (InnoDB). Idempotent: run by every client at connect.
--
-- distlock_locks: one row per lock name ever used; a released lock keeps its row (holds = 0,
--   expiry in the past) so that its fencing counter lives on.
--   name        the lock name, byte for byte: VARBINARY, so no collation folds case or ignores
--               trailing spaces (bound, never concatenated)
--   owner       the holder's secret owner token (32 hex digits), or the last holder's
--   holds       1 while held, 0 once released (re-entry is counted by the holding client)
--   token       fencing token of the current (or last) holding: the counter, advanced to
--               GREATEST(token + 1, the server clock in µs) when a new holder takes the row
--   expires_at  when the lease ends, UTC, by the server's clock (UTC_TIMESTAMP(6))
--   holder      who took the current holding: distlock::Holder's record (pid, host, process),
--               for `distlock status`; NULL in rows written before holders were recorded
--   taken_at    when the current holding began, UTC, server clock; a re-take keeps it
-- distlock_session_tokens: the fencing counter of session (GET_LOCK) locks, one row per name,
--   and who holds the lock (for `distlock status` and a forced release): holder record,
--   taken_at, conn_id (CONNECTION_ID() of the holding connection). The holder columns describe
--   a live holding only while IS_USED_LOCK(key) answers that conn_id.
-- Tables made before holders were recorded get the holder columns from schema_holder.sql.
CREATE TABLE IF NOT EXISTS distlock_locks (
    name       VARBINARY(512) NOT NULL PRIMARY KEY,
    owner      CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    holds      INT UNSIGNED NOT NULL,
    token      BIGINT UNSIGNED NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    holder     VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    taken_at   DATETIME(6) NULL
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS distlock_session_tokens (
    name     VARBINARY(512) NOT NULL PRIMARY KEY,
    token    BIGINT UNSIGNED NOT NULL,
    holder   VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    taken_at DATETIME(6) NULL,
    conn_id  BIGINT UNSIGNED NULL
) ENGINE = InnoDB;
