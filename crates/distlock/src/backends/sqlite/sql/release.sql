-- Removes one hold of the owner; the caller deletes the row when none is left.
-- ?1 name, ?2 owner
-- returns: holds left (no row if the owner does not hold the lock)
UPDATE distlock_locks SET holds = holds - 1
WHERE name = ?1 AND owner = ?2 AND holds > 1
RETURNING holds
