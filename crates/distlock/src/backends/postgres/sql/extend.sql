-- Restarts the lease of one holding: only if the owner still holds the lock with that very
-- holding (its fencing token) and has not released it. A row that is still ours after its lease
-- ended was never taken by anyone else (taking draws a new token), so extending it is safe; a
-- newer holding of the same owner has another token and is left alone.
-- $1 name, $2 owner, $3 lease in milliseconds, $4 token
-- affects 1 row if extended, 0 if that holding is gone
UPDATE distlock_locks SET expires_at = now() + $3 * interval '1 millisecond'
WHERE name = $1 AND owner = $2 AND token = $4 AND holds > 0
