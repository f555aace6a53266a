-- An election's live leader. $1 name. Returns seq, term, value, or no row.
SELECT seq, term, value FROM distlock_elections
WHERE name = $1 AND value IS NOT NULL AND expires_at > now() AND seq > 0
