-- Removes one hold of the owner in one statement; deletes the row at the last hold and then
-- notifies waiters (LISTEN distlock_released, payload = the lock name; delivered at commit).
-- $1 name, $2 owner
-- returns: holds left (0 = freed); no row if the owner does not hold the lock.
-- Both branches read the same snapshot, and a row has holds > 1 or holds = 1, never both.
WITH decremented AS (
    UPDATE distlock_locks SET holds = holds - 1
    WHERE name = $1 AND owner = $2 AND holds > 1
    RETURNING holds
), deleted AS (
    DELETE FROM distlock_locks
    WHERE name = $1 AND owner = $2 AND holds = 1
    RETURNING 0 AS holds
)
SELECT holds FROM decremented
UNION ALL
SELECT holds FROM deleted WHERE pg_notify('distlock_released', $1) IS NOT NULL
