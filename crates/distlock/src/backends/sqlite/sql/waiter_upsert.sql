-- Puts a waiter in line (at the end, on its first call) or keeps its place (later calls only
-- move its deadline on).
-- ?1 family, ?2 name, ?3 owner, ?4 boot_id, ?5 expires_ms
INSERT INTO distlock_waiters (family, name, owner, seq, boot_id, expires_ms)
VALUES (?1, ?2, ?3,
        (SELECT coalesce(max(seq), 0) + 1 FROM distlock_waiters WHERE family = ?1 AND name = ?2),
        ?4, ?5)
ON CONFLICT (family, name, owner) DO UPDATE SET
    boot_id = excluded.boot_id, expires_ms = excluded.expires_ms
