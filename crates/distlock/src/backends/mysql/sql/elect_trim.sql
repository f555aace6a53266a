-- Deletes the entries of an election's log at or below a seq. params: name, seq
DELETE FROM distlock_election_log WHERE name = ? AND seq <= ?
