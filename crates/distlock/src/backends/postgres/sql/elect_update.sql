-- Writes an election's row (the caller checked the term on the locked row).
-- $1 name, $2 seq, $3 term, $4 value or NULL, $5 ms the record stays live (0: lapsed)
UPDATE distlock_elections
SET seq = $2, term = $3, value = $4, expires_at = now() + $5 * interval '1 millisecond'
WHERE name = $1
