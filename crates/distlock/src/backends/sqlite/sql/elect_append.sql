-- Appends an entry to an election's log. ?1 name, ?2 seq, ?3 term, ?4 value or NULL
INSERT INTO distlock_election_log (name, seq, term, value) VALUES (?1, ?2, ?3, ?4)
