-- Drops a synchronizer's holdings whose lease ended (under flavour_lock.sql's lock).
-- params: family, name (bytes)
DELETE FROM distlock_holdings
WHERE family = ? AND name = ? AND expires_at <= UTC_TIMESTAMP(6)
