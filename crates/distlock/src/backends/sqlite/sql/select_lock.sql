-- The current row of one lock, if any.
-- ?1 name
-- returns: owner, token, boot_id, expires_ms (0 or 1 row)
SELECT owner, token, boot_id, expires_ms FROM distlock_locks WHERE name = ?1
