-- Writes a latch's count (the caller read and locked it: set only from 0, down never below
-- 0). params: count, name
UPDATE distlock_latches SET count = ? WHERE name = ?
