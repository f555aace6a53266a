-- An election's latest entry, live or not. params: name. Returns seq, term, value, or no row.
SELECT seq, term, value FROM distlock_elections WHERE name = ? AND seq > 0
