-- Frees one holding: the owner's, and only the one with this token when it is given.
-- params, in order: family, name (bytes), side, owner, token or NULL, the same token again
-- affects 1 row if freed, 0 if that holding is gone
DELETE FROM distlock_holdings
WHERE family = ? AND name = ? AND side = ? AND owner = ? AND (? IS NULL OR token = ?)
