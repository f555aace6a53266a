-- The row-lock strategy's read: the first product in stock with an id in [$1, $2), locked
-- FOR UPDATE until the caller's transaction ends. Run inside that transaction.
-- params: $1 lowest id, $2 id past the highest
-- returns: at most one row (id, stock, version); none when that range is sold out
-- invariant: under READ COMMITTED, a row another buyer holds is waited for and then re-checked
-- against `stock > 0` on its committed version; if sold out meanwhile it is skipped and the
-- next one locked (the row locking runs below LIMIT), so the stock returned is current.
SELECT id, stock, version
FROM demo_product
WHERE id >= $1 AND id < $2 AND stock > 0
ORDER BY id
LIMIT 1
FOR UPDATE;
