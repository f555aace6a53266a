-- The counter scenario's audit: the counter's value, the sum of its slots.
-- returns: one row (value BIGINT)
SELECT COALESCE(SUM(value), 0)::BIGINT AS value FROM demo_counter;
