-- Removes a lock's row whoever holds it (a forced release; the caller advances the fencing
-- counter in the same transaction with next_token.sql).
-- ?1 name
-- returns the removed row: token, holder, since_ms, boot_id, expires_ms (0 or 1 row)
DELETE FROM distlock_locks WHERE name = ?1
RETURNING token, holder, since_ms, boot_id, expires_ms
