-- Frees a lease lock in one statement: ends the lease (expires_at = the epoch; the row stays for
-- the next take) and notifies waiters (LISTEN distlock_released, payload = the lock name;
-- delivered at commit). Only the owner's holding, and only the one with token $3 when given
-- (a guard's release), so an older guard never frees a newer holding of the same owner.
-- $1 name, $2 owner, $3 token or NULL (release by owner token, without a guard)
-- returns one row if freed, none if that holding is gone (nothing changed, nobody told).
WITH released AS (
    UPDATE distlock_locks
    SET holds = 0, expires_at = 'epoch'::timestamptz
    WHERE name = $1 AND owner = $2 AND holds > 0 AND ($3::bigint IS NULL OR token = $3)
    RETURNING name
)
SELECT pg_notify('distlock_released', $1) FROM released
