-- The row-lock strategy's read of a counter slot, locked FOR UPDATE until the caller's
-- transaction ends. Run inside that transaction.
-- params: $1 slot
-- returns: one row (value, version), current: a holder's write is committed before we read
SELECT value, version FROM demo_counter WHERE slot = $1 FOR UPDATE;
