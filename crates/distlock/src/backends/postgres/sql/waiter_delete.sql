-- A waiter that takes the lock leaves the line. $1 family, $2 name, $3 owner
DELETE FROM distlock_waiters WHERE family = $1 AND name = $2 AND owner = $3
