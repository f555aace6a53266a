-- A waiter leaves the line (it took the lock, or gave up).
-- params: family, name (bytes), owner
DELETE FROM distlock_waiters WHERE family = ? AND name = ? AND owner = ?
