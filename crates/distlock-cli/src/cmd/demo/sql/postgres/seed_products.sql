-- Puts products $1 ..= $3 on sale, each with $2 units (called once per chunk of ids).
-- params: $1 first id, $2 units of each, $3 last id
INSERT INTO demo_product (id, stock, initial_stock)
SELECT i, $2, $2 FROM generate_series($1::BIGINT, $3::BIGINT) AS i;
