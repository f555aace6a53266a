-- Creates counter slots 0 .. $1, each at 0.
-- params: $1 number of slots (>= 1)
INSERT INTO demo_counter (slot, value) SELECT i, 0 FROM generate_series(0, $1::BIGINT - 1) AS i;
