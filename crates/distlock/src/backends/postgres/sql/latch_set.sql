-- Sets a latch's count if it is 0 or the latch is new. $1 name, $2 count (>= 1)
-- Returns a row if set, none if a count is running.
INSERT INTO distlock_latches AS l (name, count) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET count = excluded.count WHERE l.count = 0
RETURNING count
