-- Atomic check-and-decrement: finds the first product in stock in [?1, ?2) and takes one unit
-- in a single statement, so no other writer can come between the check and the write (SQLite
-- runs one writer at a time, and this statement is one write transaction).
-- params: ?1 wall clock in µs, ?2 lowest id, ?3 id past the highest
-- returns: the id of the product taken, or no row when the range is sold out
-- invariant: stock never goes below 0 (the outer `stock > 0` re-checks the row it updates)
UPDATE demo_product
SET stock = stock - 1, version = version + 1, modified_us = ?1
WHERE id = (
    SELECT id FROM demo_product
    WHERE id >= ?2 AND id < ?3 AND stock > 0
    ORDER BY id
    LIMIT 1
)
AND stock > 0
RETURNING id;
