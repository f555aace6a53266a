-- The counter scenario's audit: the counter's value, the sum of its slots.
-- returns: one row (value)
SELECT COALESCE(SUM(value), 0) AS value FROM demo_counter;
