-- Sets a latch's count if it is 0 or the latch is new. ?1 name, ?2 count (>= 1)
-- Changes one row if set, none if a count is running.
INSERT INTO distlock_latches (name, count) VALUES (?1, ?2)
ON CONFLICT (name) DO UPDATE SET count = excluded.count WHERE count = 0
