-- Frees one holding: the owner's, and only the one with this token when ?5 is given.
-- ?1 family, ?2 name, ?3 side, ?4 owner, ?5 token or NULL (release by owner token)
-- affects 1 row if freed, 0 if that holding is gone
DELETE FROM distlock_holdings
WHERE family = ?1 AND name = ?2 AND side = ?3 AND owner = ?4 AND (?5 IS NULL OR token = ?5)
