-- One more hold by the owner that holds the lock now; resets the lease.
-- ?1 name, ?2 owner, ?3 expires_ms
UPDATE distlock_locks SET holds = holds + 1, expires_ms = ?3 WHERE name = ?1 AND owner = ?2
