-- Forced release, step 2: removes every holding of one side, whoever holds it.
-- params: family, name (bytes), side
DELETE FROM distlock_holdings WHERE family = ? AND name = ? AND side = ?
