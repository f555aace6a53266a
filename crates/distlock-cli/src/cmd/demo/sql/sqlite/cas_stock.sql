-- Optimistic write: succeeds only if nobody wrote the product since the caller read `version`.
-- params: ?1 product id, ?2 new stock, ?3 wall clock in µs, ?4 version the caller read
-- returns: rows affected, 1 if the swap happened, 0 on a conflict (the caller retries)
UPDATE demo_product
SET stock = ?2, version = version + 1, modified_us = ?3
WHERE id = ?1 AND version = ?4;
