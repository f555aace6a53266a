-- The first product in stock with an id in [$1, $2): what a buyer tries to order next.
-- params: $1 lowest id, $2 id past the highest
-- returns: at most one row (id, stock, version); none when that range is sold out
-- A plain read: by the time the caller writes, another buyer may have taken the unit. Only the
-- caller's strategy (a lock, a version check) makes read-then-write safe.
SELECT id, stock, version
FROM demo_product
WHERE id >= $1 AND id < $2 AND stock > 0
ORDER BY id
LIMIT 1;
