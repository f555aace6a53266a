-- Writes a value the caller computed in memory (read, add one, write back): non-atomic.
-- params (in order): new value, slot
UPDATE demo_counter SET value = ?, version = version + 1 WHERE slot = ?;
