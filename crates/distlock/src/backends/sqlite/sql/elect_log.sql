-- The entries of an election's log after seq ?2, oldest first. ?1 name
SELECT seq, term, value FROM distlock_election_log WHERE name = ?1 AND seq > ?2 ORDER BY seq
