-- Locks and reads a latch's count inside the caller's transaction. params: name.
-- Returns count, or no row for a latch never set.
SELECT count FROM distlock_latches WHERE name = ? FOR UPDATE
