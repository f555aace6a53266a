-- Restarts the lease of one holding: only if the owner still holds the lock with that very
-- holding (its fencing token) and has not released it. A row that is still ours after its lease
-- ended was never taken by anyone else (taking bumps the token), so extending it is safe; a
-- newer holding of the same owner has another token and is left alone.
-- params, in order: lease in microseconds, name, owner, token
-- matches 1 row if extended, 0 if that holding is gone
UPDATE distlock_locks SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND owner = ? AND token = ? AND holds > 0
