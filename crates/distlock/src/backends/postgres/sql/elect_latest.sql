-- An election's latest entry, live or not. $1 name. Returns seq, term, value, or no row.
SELECT seq, term, value FROM distlock_elections WHERE name = $1 AND seq > 0
