-- The counter scenario's audit: the counter's value, the sum of its slots.
-- returns: one row (value, BIGINT: SUM is DECIMAL in MySQL, hence the cast)
SELECT CAST(COALESCE(SUM(value), 0) AS SIGNED) AS value FROM demo_counter;
