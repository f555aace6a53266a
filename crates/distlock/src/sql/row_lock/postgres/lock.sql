-- Row lock: locks the name's row in the caller's open transaction. Other transactions asking for
-- the same row wait here until this one commits or rolls back: the lock is released by the very
-- commit that makes the caller's writes visible, never before it.
-- $1 name
-- returns: the name (no row if the row does not exist yet: the caller creates it and retries).
SELECT name FROM distlock_row_locks WHERE name = $1 FOR UPDATE
