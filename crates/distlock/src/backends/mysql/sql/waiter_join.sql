-- Puts a waiter in line (at the end, on its first call) or keeps its place (later calls move
-- its deadline on). Under flavour_lock.sql's lock, so seq is drawn by one step at a time.
-- params, in order: family, name (bytes), owner, how long the place lasts (µs), family, name
INSERT INTO distlock_waiters (family, name, owner, seq, expires_at)
SELECT ?, ?, ?, COALESCE(MAX(seq), 0) + 1, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
FROM distlock_waiters WHERE family = ? AND name = ?
ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)
