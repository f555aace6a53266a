-- Removes one hold of the owner in one statement; at the last hold it ends the lease
-- (expires_at = the epoch, the row stays for the next take) and notifies waiters
-- (LISTEN distlock_released, payload = the lock name; delivered at commit).
-- $1 name, $2 owner
-- returns: holds left (0 = freed); no row if the owner does not hold the lock.
-- SET expressions all read the row as it was, so `holds = 1` means "this was the last hold".
-- CASE, not OR: the notice must go out only when the lock became free.
WITH released AS (
    UPDATE distlock_locks
    SET holds = holds - 1,
        expires_at = CASE WHEN holds = 1 THEN 'epoch'::timestamptz ELSE expires_at END
    WHERE name = $1 AND owner = $2 AND holds > 0
    RETURNING holds
)
SELECT holds FROM released
WHERE CASE WHEN holds > 0 THEN true ELSE pg_notify('distlock_released', $1) IS NOT NULL END
