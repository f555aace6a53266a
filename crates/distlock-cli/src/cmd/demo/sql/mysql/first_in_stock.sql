-- The first product in stock with an id in [lowest, past): what a buyer tries to order next.
-- params (in order): lowest id, id past the highest
-- returns: at most one row (id, stock, version); none when that range is sold out
-- A plain (consistent, non-locking) read: by the time the caller writes, another buyer may have
-- taken the unit. Only the caller's strategy (a lock, a version check) makes read-then-write safe.
SELECT id, stock, version
FROM demo_product
WHERE id >= ? AND id < ? AND stock > 0
ORDER BY id
LIMIT 1;
