-- Writes a new holding (the step judged that it may be taken, under flavour_lock.sql's lock).
-- params, in order: family, name (bytes), side, owner, token, lease in microseconds, holder
--   record
INSERT INTO distlock_holdings (family, name, side, owner, token, expires_at, holder, taken_at)
VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    token = VALUES(token), expires_at = VALUES(expires_at),
    holder = VALUES(holder), taken_at = VALUES(taken_at)
