-- Draws a synchronizer's next fencing token (under flavour_lock.sql's row lock): one more than
-- the last, never below the server clock in µs (see schema_flavours.sql).
-- $1 family, $2 name
-- returns: the new token
UPDATE distlock_flavours
SET token = GREATEST(token + 1, floor(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::bigint)
WHERE family = $1 AND name = $2
RETURNING token
