-- The first waiter in line (the caller purged first), and until when its place lasts.
-- ?1 family, ?2 name
-- returns: owner, expires_ms (0 or 1 row)
SELECT owner, expires_ms FROM distlock_waiters
WHERE family = ?1 AND name = ?2
ORDER BY seq LIMIT 1
