-- Drops a synchronizer's holdings whose lease ended and places whose waiter stopped asking,
-- before the step judges it (under flavour_lock.sql's row lock).
-- $1 family, $2 name
-- returns one row: holdings dropped, places dropped
WITH holdings AS (
    DELETE FROM distlock_holdings WHERE family = $1 AND name = $2 AND expires_at <= now()
    RETURNING 1
), places AS (
    DELETE FROM distlock_waiters WHERE family = $1 AND name = $2 AND expires_at <= now()
    RETURNING 1
)
SELECT (SELECT count(*) FROM holdings), (SELECT count(*) FROM places)
