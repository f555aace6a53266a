-- Removes every holding of one side, whoever holds it (a forced release; the caller advances
-- the fencing counter in the same transaction with next_token.sql).
-- ?1 family, ?2 name, ?3 side
-- returns the removed rows: token, holder, since_ms, boot_id, expires_ms
DELETE FROM distlock_holdings WHERE family = ?1 AND name = ?2 AND side = ?3
RETURNING token, holder, since_ms, boot_id, expires_ms
