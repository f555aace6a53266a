-- Writes a stock level the caller computed in memory: the sources' non-atomic step.
-- params: ?1 product id, ?2 new stock, ?3 wall clock in µs
-- invariant: none by itself; two buyers who read the same stock both write the same value.
UPDATE demo_product
SET stock = ?2, version = version + 1, modified_us = ?3
WHERE id = ?1;
