-- An election's live leader. params: name. Returns seq, term, value, or no row.
SELECT seq, term, value FROM distlock_elections
WHERE name = ? AND value IS NOT NULL AND expires_at > UTC_TIMESTAMP(6) AND seq > 0
