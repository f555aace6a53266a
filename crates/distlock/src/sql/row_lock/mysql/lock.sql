-- Row lock: locks the name's row in the caller's open transaction (a locking read, which sees
-- the latest committed row whatever the isolation level). Other transactions asking for the row
-- wait until this one ends (innodb_lock_wait_timeout, 50 s by default, then error 1205): the
-- lock is released by the very commit that makes the caller's writes visible.
-- params: name
-- returns: the name (no row if the row does not exist yet: the caller creates it and retries).
SELECT name FROM distlock_row_locks WHERE name = ? FOR UPDATE
