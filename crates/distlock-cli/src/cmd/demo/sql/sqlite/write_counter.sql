-- Writes a value the caller computed in memory (read, add one, write back): non-atomic.
-- params: ?1 slot, ?2 new value
UPDATE demo_counter SET value = ?2, version = version + 1 WHERE slot = ?1;
