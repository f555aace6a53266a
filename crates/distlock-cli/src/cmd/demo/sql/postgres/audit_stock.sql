-- The stock scenario's audit, read after every instance has stopped.
-- returns: one row, every column BIGINT (SUM of BIGINT is NUMERIC in PostgreSQL, hence the casts)
--   negative  products whose stock went below 0
--   units     units sold by the stock's own account: sum of (initial_stock - stock)
--   orders    order rows
--   oversold  units sold beyond a product's initial stock: sum of max(0, orders - initial_stock)
-- A correct run has negative = 0, oversold = 0 and orders = units.
SELECT
    COALESCE(SUM(CASE WHEN stock < 0 THEN 1 ELSE 0 END), 0)::BIGINT AS negative,
    COALESCE(SUM(initial_stock - stock), 0)::BIGINT AS units,
    (SELECT COUNT(*) FROM demo_order)::BIGINT AS orders,
    COALESCE(SUM(GREATEST(0, sold - initial_stock)), 0)::BIGINT AS oversold
FROM (
    SELECT p.stock, p.initial_stock, COUNT(o.id) AS sold
    FROM demo_product p LEFT JOIN demo_order o ON o.product_id = p.id
    GROUP BY p.id
) AS per_product;
