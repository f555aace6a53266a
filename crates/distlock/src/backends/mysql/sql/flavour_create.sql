-- Creates a synchronizer's row if missing, outside any transaction (autocommit), before
-- flavour_lock.sql: an INSERT IGNORE inside the step's transaction would take a shared lock
-- that its FOR UPDATE then upgrades, which deadlocks two steps.
-- params: family, name (bytes)
INSERT IGNORE INTO distlock_flavours (family, name, token) VALUES (?, ?, 0)
