-- Optimistic write: succeeds only if nobody wrote the product since the caller read `version`.
-- params (in order): new stock, wall clock in µs, product id, version the caller read
-- returns: rows affected, 1 if the swap happened, 0 on a conflict (the caller retries)
-- An UPDATE's WHERE is evaluated on the latest committed row (a locking read), so the loser of
-- two concurrent swaps sees 0 rows, never a lost update.
UPDATE demo_product
SET stock = ?, version = version + 1, modified_us = ?
WHERE id = ? AND version = ?;
