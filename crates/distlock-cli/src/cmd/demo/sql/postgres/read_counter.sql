-- Reads one counter slot.
-- params: $1 slot
-- returns: one row (value, version)
SELECT value, version FROM demo_counter WHERE slot = $1;
