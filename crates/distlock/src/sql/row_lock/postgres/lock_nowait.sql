-- Row lock without waiting: as lock.sql, but fails with SQLSTATE 55P03 (lock_not_available)
-- at once if another transaction holds the row.
-- $1 name
SELECT name FROM distlock_row_locks WHERE name = $1 FOR UPDATE NOWAIT
