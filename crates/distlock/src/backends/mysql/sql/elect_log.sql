-- The entries of an election's log after a seq, oldest first. params: name, seq
SELECT seq, term, value FROM distlock_election_log WHERE name = ? AND seq > ? ORDER BY seq
