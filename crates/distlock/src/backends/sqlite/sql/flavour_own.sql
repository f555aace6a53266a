-- The owner's holding of one side, if any (live: the caller purged first).
-- ?1 family, ?2 name, ?3 side, ?4 owner
-- returns: token (0 or 1 row)
SELECT token FROM distlock_holdings
WHERE family = ?1 AND name = ?2 AND side = ?3 AND owner = ?4
