-- An election's row. ?1 name. Returns seq, term, value, boot_id, expires_ms, or no row.
SELECT seq, term, value, boot_id, expires_ms FROM distlock_elections WHERE name = ?1
