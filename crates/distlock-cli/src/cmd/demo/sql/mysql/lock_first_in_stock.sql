-- The row-lock strategy's read: the first product in stock with an id in [lowest, past), locked
-- FOR UPDATE until the caller's transaction ends. Run inside that transaction.
-- params (in order): lowest id, id past the highest
-- returns: at most one row (id, stock, version); none when that range is sold out
-- invariant: a locking read in InnoDB reads the latest committed version, not the transaction's
-- snapshot: a row another buyer holds is waited for, then re-checked against `stock > 0`, and
-- the scan moves on to the next row if it sold out meanwhile. Every buyer locks in id order, so
-- no two of them deadlock.
SELECT id, stock, version
FROM demo_product
WHERE id >= ? AND id < ? AND stock > 0
ORDER BY id
LIMIT 1
FOR UPDATE;
