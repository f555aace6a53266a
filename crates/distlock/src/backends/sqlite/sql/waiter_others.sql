-- How many waiters other than ?3 are in line, and when the first of their places lapses.
-- ?1 family, ?2 name, ?3 owner
-- returns: count, min(expires_ms) (NULL when count is 0)
SELECT count(*), min(expires_ms) FROM distlock_waiters
WHERE family = ?1 AND name = ?2 AND owner <> ?3
