-- Writes a stock level the caller computed in memory: the sources' non-atomic step.
-- params (in order): new stock, wall clock in µs, product id
-- invariant: none by itself; two buyers who read the same stock both write the same value.
UPDATE demo_product
SET stock = ?, version = version + 1, modified_us = ?
WHERE id = ?;
