-- Resets the lease if the owner still holds the lock (holds > 0: not released). A row that is
-- still ours after its lease ended was never taken by anyone else (taking overwrites the owner),
-- so extending it is safe.
-- $1 name, $2 owner, $3 lease in milliseconds
-- affects 1 row if extended, 0 if the owner does not hold the lock
UPDATE distlock_locks SET expires_at = now() + $3 * interval '1 millisecond'
WHERE name = $1 AND owner = $2 AND holds > 0
