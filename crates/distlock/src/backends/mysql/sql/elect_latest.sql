-- An election's latest entry, live or not. params: name. Returns seq, term (as
-- SIGNED, the type both dialects answer), value, or no row.
SELECT CAST(seq AS SIGNED), CAST(term AS SIGNED), value
FROM distlock_elections WHERE name = ? AND seq > 0
