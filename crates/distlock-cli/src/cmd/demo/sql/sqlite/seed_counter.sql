-- Creates counter slots 0 .. ?1, each at 0.
-- params: ?1 number of slots (>= 1)
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1)
INSERT INTO demo_counter (slot, value) SELECT i, 0 FROM n;
