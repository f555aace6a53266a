-- How many holdings of one side other owners have, and when the first of them ends (the caller
-- purged first, so every row is live).
-- ?1 family, ?2 name, ?3 side, ?4 owner
-- returns: count, min(expires_ms) (NULL when count is 0)
SELECT count(*), min(expires_ms) FROM distlock_holdings
WHERE family = ?1 AND name = ?2 AND side = ?3 AND owner <> ?4
