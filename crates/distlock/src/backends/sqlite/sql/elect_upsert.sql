-- Writes an election's row (the caller has checked the term in the same transaction).
-- ?1 name, ?2 seq, ?3 term, ?4 value or NULL, ?5 boot_id, ?6 expires_ms
INSERT INTO distlock_elections (name, seq, term, value, boot_id, expires_ms)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (name) DO UPDATE SET
    seq = excluded.seq, term = excluded.term, value = excluded.value,
    boot_id = excluded.boot_id, expires_ms = excluded.expires_ms
