-- Deletes the entries of an election's log at or below seq ?2. ?1 name
DELETE FROM distlock_election_log WHERE name = ?1 AND seq <= ?2
