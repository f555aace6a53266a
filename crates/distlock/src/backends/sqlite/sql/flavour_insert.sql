-- Writes a new holding (the caller judged that it may be taken, in the same transaction).
-- ?1 family, ?2 name, ?3 side, ?4 owner, ?5 token, ?6 boot_id, ?7 expires_ms, ?8 holder record,
-- ?9 since_ms
INSERT INTO distlock_holdings
    (family, name, side, owner, token, boot_id, expires_ms, holder, since_ms)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (family, name, side, owner) DO UPDATE SET
    token = excluded.token, boot_id = excluded.boot_id, expires_ms = excluded.expires_ms,
    holder = excluded.holder, since_ms = excluded.since_ms
