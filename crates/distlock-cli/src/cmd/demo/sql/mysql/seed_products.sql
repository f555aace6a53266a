-- Puts products ? ..= ? on sale, each with ? units; called once per chunk of at most 1000 ids,
-- MariaDB's default max_recursive_iterations (and MySQL's cte_max_recursion_depth).
-- params (in order): first id, units of each, last id
INSERT INTO demo_product (id, stock, initial_stock)
WITH RECURSIVE n (i, units) AS (
    SELECT CAST(? AS SIGNED), CAST(? AS SIGNED)
    UNION ALL
    SELECT i + 1, units FROM n WHERE i < ?
)
SELECT i, units, units FROM n;
