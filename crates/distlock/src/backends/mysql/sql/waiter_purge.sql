-- Drops the places of waiters that stopped asking (under flavour_lock.sql's lock).
-- params: family, name (bytes)
-- affects the number of places dropped
DELETE FROM distlock_waiters
WHERE family = ? AND name = ? AND expires_at <= UTC_TIMESTAMP(6)
