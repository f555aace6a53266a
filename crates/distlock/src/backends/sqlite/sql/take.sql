-- Writes a new holding of a lock (free, expired or from an earlier boot: the caller checked).
-- ?1 name, ?2 owner, ?3 token, ?4 boot_id, ?5 expires_ms, ?6 holder record, ?7 since_ms
INSERT INTO distlock_locks (name, owner, holds, token, boot_id, expires_ms, holder, since_ms)
VALUES (?1, ?2, 1, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (name) DO UPDATE SET
    owner = excluded.owner, holds = 1, token = excluded.token,
    boot_id = excluded.boot_id, expires_ms = excluded.expires_ms,
    holder = excluded.holder, since_ms = excluded.since_ms
