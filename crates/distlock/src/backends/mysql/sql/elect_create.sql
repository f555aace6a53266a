-- Creates an election's row if missing (empty: seq 0, term 0), before elect_lock_row.sql locks
-- it (only when elect_lock_row.sql found no row). params: name
INSERT IGNORE INTO distlock_elections (name, seq, term, value, expires_at)
VALUES (?, 0, 0, NULL, UTC_TIMESTAMP(6))
