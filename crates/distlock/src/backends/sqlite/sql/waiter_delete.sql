-- A waiter leaves the line (it took the lock, gave up, or was cancelled).
-- ?1 family, ?2 name, ?3 owner
-- affects 1 row if it was in line, 0 if not
DELETE FROM distlock_waiters WHERE family = ?1 AND name = ?2 AND owner = ?3
