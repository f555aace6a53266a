-- Creates counter slots 0 .. ?, each at 0 (at most 1000: the recursion limit, as above).
-- params: number of slots (>= 1)
INSERT INTO demo_counter (slot, value)
WITH RECURSIVE n (i) AS (SELECT CAST(0 AS SIGNED) UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
SELECT i, 0 FROM n;
