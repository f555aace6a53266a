-- The row-lock API's table (crate::sql::RowLock) in PostgreSQL. Idempotent: run by the first
-- row lock that finds the table missing.
--
-- distlock_row_locks: one row per name used with the row-lock API (SELECT … FOR UPDATE in the
--   caller's transaction); never deleted, rows are tiny.
--   name  the lock name, byte for byte (bound, never concatenated; "C" collation: equality is
--         by bytes, no case folding)
-- Clients creating the objects at once would race in the catalog ("duplicate key value violates
-- unique constraint pg_type_typname_nsp_index", IF NOT EXISTS notwithstanding): one at a time,
-- under the transaction-scoped advisory lock distlock's other tables are made under (this
-- string runs as one implicit transaction).
SELECT pg_advisory_xact_lock(7235441220220052331); -- 'distlock' as a 64-bit key
CREATE TABLE IF NOT EXISTS distlock_row_locks (
    name text COLLATE "C" PRIMARY KEY
);
