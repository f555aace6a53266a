-- Atomic check-and-decrement: finds the first product in stock in [$2, $3) and takes one unit
-- in a single statement.
-- params: $1 wall clock in µs, $2 lowest id, $3 id past the highest
-- returns: the id of the product taken, or no row
-- invariant: stock never goes below 0: the outer `stock > 0` is re-checked on the row's latest
-- committed version after waiting for a concurrent writer. The subquery is not re-run, so a
-- buyer who lost that race gets no row although the range may still have stock: the caller
-- tries again until first_in_stock.sql finds the range sold out.
UPDATE demo_product
SET stock = stock - 1, version = version + 1, modified_us = $1
WHERE id = (
    SELECT id FROM demo_product
    WHERE id >= $2 AND id < $3 AND stock > 0
    ORDER BY id
    LIMIT 1
)
AND stock > 0
RETURNING id;
