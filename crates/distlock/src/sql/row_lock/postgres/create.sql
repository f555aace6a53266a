-- Row lock: creates the name's row if missing, in its own (autocommit) statement, so that the
-- row exists for SELECT … FOR UPDATE. Rows are never deleted.
-- $1 name
INSERT INTO distlock_row_locks (name) VALUES ($1) ON CONFLICT (name) DO NOTHING
