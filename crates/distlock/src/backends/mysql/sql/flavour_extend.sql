-- Restarts the lease of one holding: the owner's, the one with this token. A row still there
-- after its lease ended was never counted past (every judging step purges first), so extending
-- it is safe.
-- params, in order: lease in microseconds, family, name (bytes), side, owner, token
-- matches 1 row if extended, 0 if that holding is gone
UPDATE distlock_holdings SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE family = ? AND name = ? AND side = ? AND owner = ? AND token = ?
