-- Frees a lease lock in one statement: the lease is ended (expires_at set to the epoch) so the
-- next take sees the lock free. The row stays: it carries the fencing counter. Only the owner's
-- holding, and only the one with the given token when there is one (a guard's release), so an
-- older guard never frees a newer holding of the same owner.
-- params, in order: name, owner, token or NULL (release by owner token), the same again
-- matches 1 row if freed, 0 if that holding is gone
UPDATE distlock_locks
SET holds = 0, expires_at = '1970-01-01 00:00:00'
WHERE name = ? AND owner = ? AND holds > 0 AND (? IS NULL OR token = ?)
