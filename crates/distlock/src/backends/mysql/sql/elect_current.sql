-- An election's live leader. params: name. Returns seq, term (as
-- SIGNED, the type both dialects answer), value, or no row.
SELECT CAST(seq AS SIGNED), CAST(term AS SIGNED), value
FROM distlock_elections
WHERE name = ? AND value IS NOT NULL AND expires_at > UTC_TIMESTAMP(6) AND seq > 0
