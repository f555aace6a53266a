-- Counts a latch down by one, never below 0. ?1 name
-- Returns the count after, or no row if the latch was at 0 or does not exist.
UPDATE distlock_latches SET count = count - 1 WHERE name = ?1 AND count > 0 RETURNING count
