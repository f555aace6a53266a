-- Optimistic write: succeeds only if nobody wrote the product since the caller read `version`.
-- params: ?1 new stock, ?2 wall clock in µs, ?3 product id, ?4 version the caller read
-- returns: rows affected, 1 if the swap happened, 0 on a conflict (the caller retries)
UPDATE demo_product
SET stock = ?1, version = version + 1, modified_us = ?2
WHERE id = ?3 AND version = ?4;
