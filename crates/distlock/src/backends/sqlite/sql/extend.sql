-- Restarts the lease of one holding: only if the owner still holds the lock with that very
-- holding (its fencing token). A row that is still ours after its lease ended was never taken by
-- anyone else (taking draws a new token), so extending it is safe; a newer holding of the same
-- owner has another token and is left alone.
-- ?1 name, ?2 owner, ?3 expires_ms, ?4 boot_id, ?5 token
-- affects 1 row if extended, 0 if that holding is gone
UPDATE distlock_locks SET expires_ms = ?3
WHERE name = ?1 AND owner = ?2 AND boot_id = ?4 AND token = ?5
