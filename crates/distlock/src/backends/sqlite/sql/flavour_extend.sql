-- Restarts the lease of one holding: only the owner's, only the one with this fencing token,
-- only in this boot. A row still there after its lease ended was never counted past by anyone
-- (every take purges first), so extending it is safe.
-- ?1 family, ?2 name, ?3 side, ?4 owner, ?5 token, ?6 expires_ms, ?7 boot_id
-- affects 1 row if extended, 0 if that holding is gone
UPDATE distlock_holdings SET expires_ms = ?6
WHERE family = ?1 AND name = ?2 AND side = ?3 AND owner = ?4 AND token = ?5 AND boot_id = ?7
