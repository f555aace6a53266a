-- Reads one counter slot.
-- params: slot
-- returns: one row (value, version)
SELECT value, version FROM demo_counter WHERE slot = ?;
