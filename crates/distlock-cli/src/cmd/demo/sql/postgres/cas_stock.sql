-- Optimistic write: succeeds only if nobody wrote the product since the caller read `version`.
-- params: $1 new stock, $2 wall clock in µs, $3 product id, $4 version the caller read
-- returns: rows affected, 1 if the swap happened, 0 on a conflict (the caller retries)
-- Under READ COMMITTED a concurrent writer's row is waited for, then the version re-checked on
-- its committed version: the loser sees 0 rows, never a lost update.
UPDATE demo_product
SET stock = $1, version = version + 1, modified_us = $2
WHERE id = $3 AND version = $4;
