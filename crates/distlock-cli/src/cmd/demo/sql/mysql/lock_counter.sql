-- The row-lock strategy's read of a counter slot, locked FOR UPDATE until the caller's
-- transaction ends. Run inside that transaction.
-- params: slot
-- returns: one row (value, version), the latest committed (a locking read ignores the snapshot)
SELECT value, version FROM demo_counter WHERE slot = ? FOR UPDATE;
