-- Writes a stock level the caller computed in memory: the sources' non-atomic step.
-- params: $1 new stock, $2 wall clock in µs, $3 product id
-- invariant: none by itself; two buyers who read the same stock both write the same value.
UPDATE demo_product
SET stock = $1, version = version + 1, modified_us = $2
WHERE id = $3;
