-- Writes a new holding (the step judged that it may be taken, under flavour_lock.sql's lock) in
-- one statement: the taker leaves the line, the synchronizer's next fencing token is drawn (one
-- more than the last, never below the server clock in µs), the holding is written.
-- $1 family, $2 name, $3 side, $4 owner, $5 lease in ms, $6 holder record
-- returns: the new token
WITH left_line AS (
    DELETE FROM distlock_waiters WHERE family = $1 AND name = $2 AND owner = $4
), drawn AS (
    UPDATE distlock_flavours
    SET token = GREATEST(token + 1,
                         floor(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint)
    WHERE family = $1 AND name = $2
    RETURNING token
)
INSERT INTO distlock_holdings (family, name, side, owner, token, expires_at, holder, taken_at)
SELECT $1, $2, $3, $4, token, now() + $5 * interval '1 millisecond', $6, now() FROM drawn
ON CONFLICT (family, name, side, owner) DO UPDATE SET
    token = excluded.token, expires_at = excluded.expires_at,
    holder = excluded.holder, taken_at = excluded.taken_at
RETURNING token
