-- Puts products 1 ..= ?1 on sale, each with ?2 units.
-- params: ?1 number of products (N), ?2 units of each
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
INSERT INTO demo_product (id, stock, initial_stock)
SELECT i, ?2, ?2 FROM n;
