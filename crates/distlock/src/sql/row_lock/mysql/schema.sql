-- The row-lock API's table (crate::sql::RowLock) in MySQL / MariaDB (InnoDB). Idempotent: run
-- by the first row lock that finds the table missing.
--
-- distlock_row_locks: one row per name used with the row-lock API (SELECT … FOR UPDATE in the
--   caller's transaction); never deleted, rows are tiny.
--   name  the lock name, byte for byte: VARBINARY, so no collation folds case or ignores
--         trailing spaces (bound, never concatenated)
CREATE TABLE IF NOT EXISTS distlock_row_locks (
    name VARBINARY(512) NOT NULL PRIMARY KEY
) ENGINE = InnoDB;
