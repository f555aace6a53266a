-- Writes a new holding (the step judged that it may be taken, under flavour_lock.sql's lock).
-- $1 family, $2 name, $3 side, $4 owner, $5 token, $6 lease in ms, $7 holder record
INSERT INTO distlock_holdings (family, name, side, owner, token, expires_at, holder, taken_at)
VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 millisecond', $7, now())
ON CONFLICT (family, name, side, owner) DO UPDATE SET
    token = excluded.token, expires_at = excluded.expires_at,
    holder = excluded.holder, taken_at = excluded.taken_at
