-- Writes a value the caller computed in memory (read, add one, write back): non-atomic.
-- params: ?1 new value, ?2 slot
UPDATE demo_counter SET value = ?1, version = version + 1 WHERE slot = ?2;
