-- Removes one hold of the owner in one statement; at the last hold the lease is ended
-- (expires_at set to the epoch) so the next take sees the lock free. The row stays: it carries
-- the fencing counter.
-- params, in order: name, owner
-- returns: matched rows (0: the owner does not hold the lock) and, through the last-insert-id,
--   the holds left (0 = freed). holds is assigned first, so expires_at sees the new count.
UPDATE distlock_locks
SET holds = LAST_INSERT_ID(holds - 1),
    expires_at = IF(holds = 0, '1970-01-01 00:00:00', expires_at)
WHERE name = ? AND owner = ? AND holds > 0
