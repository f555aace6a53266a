-- Creates a synchronizer's row if missing and locks it for the rest of the transaction: the
-- step that judges who holds it runs alone.
-- $1 family, $2 name
-- returns one row: token (the last handed out), permits (a semaphore's size as bigint, the
--   type both dialects answer; NULL for the others)
INSERT INTO distlock_flavours AS f (family, name, token) VALUES ($1, $2, 0)
ON CONFLICT (family, name) DO UPDATE SET token = f.token
RETURNING token, permits::bigint
