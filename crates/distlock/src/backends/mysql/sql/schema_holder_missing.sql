-- The lock tables that lack the holder columns (made by a version that recorded no holders):
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS, so the catalog is asked first, and the caller runs
-- schema_holder_locks.sql / schema_holder_sessions.sql for the tables named.
-- returns: one row per such table, its name.
SELECT CAST(t.table_name AS CHAR CHARACTER SET utf8mb4) FROM information_schema.tables AS t
WHERE t.table_schema = DATABASE()
  AND t.table_name IN ('distlock_locks', 'distlock_session_tokens')
  AND NOT EXISTS (SELECT 1 FROM information_schema.columns AS c
                  WHERE c.table_schema = t.table_schema AND c.table_name = t.table_name
                    AND c.column_name = 'holder')
