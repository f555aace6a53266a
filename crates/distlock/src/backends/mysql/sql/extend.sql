-- Resets the lease if the owner still holds the lock (holds > 0: not released). A row that is
-- still ours after its lease ended was never taken by anyone else, so extending it is safe.
-- params, in order: lease in microseconds, name, owner
-- matches 1 row if extended, 0 if the owner does not hold the lock
UPDATE distlock_locks SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND owner = ? AND holds > 0
