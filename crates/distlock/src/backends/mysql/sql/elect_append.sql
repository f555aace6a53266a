-- Appends an entry to an election's log. params: name, seq, term, value or NULL
INSERT INTO distlock_election_log (name, seq, term, value) VALUES (?, ?, ?, ?)
