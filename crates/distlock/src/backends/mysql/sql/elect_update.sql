-- Writes an election's row (the caller checked the term on the locked row).
-- params, bound in order: seq, term, value or NULL, µs the record stays live (0: lapsed), name
UPDATE distlock_elections
SET seq = ?, term = ?, value = ?, expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ?
