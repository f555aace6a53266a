-- Creates an election's row if missing (empty: seq 0, term 0), before elect_lock_row.sql locks
-- it (a statement of its own: a SELECT in the same statement would not see the new row).
-- $1 name
INSERT INTO distlock_elections (name, seq, term, value, expires_at)
VALUES ($1, 0, 0, NULL, now())
ON CONFLICT (name) DO NOTHING
