-- Frees a lock whose owner released its last hold.
-- ?1 name, ?2 owner
-- affects 1 row if freed, 0 if the owner does not hold the lock
DELETE FROM distlock_locks WHERE name = ?1 AND owner = ?2
