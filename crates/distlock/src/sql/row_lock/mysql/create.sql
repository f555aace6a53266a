-- Row lock: creates the name's row if missing, in its own (autocommit) statement, outside the
-- caller's transaction (inserting inside it would take gap locks that can deadlock with other
-- first-time callers). Rows are never deleted.
-- params: name
INSERT INTO distlock_row_locks (name) VALUES (?) ON DUPLICATE KEY UPDATE name = name
