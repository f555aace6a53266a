-- Restarts the lease of one holding: the owner's, the one with this token. A row still there
-- after its lease ended was never counted past (every judging step purges first), so extending
-- it is safe.
-- $1 family, $2 name, $3 side, $4 owner, $5 token, $6 lease in ms
-- affects 1 row if extended, 0 if that holding is gone
UPDATE distlock_holdings SET expires_at = now() + $6 * interval '1 millisecond'
WHERE family = $1 AND name = $2 AND side = $3 AND owner = $4 AND token = $5
