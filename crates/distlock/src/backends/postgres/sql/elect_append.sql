-- Appends an entry to an election's log and drops the entries older than the last $5.
-- $1 name, $2 seq, $3 term, $4 value or NULL, $5 entries to keep
WITH appended AS (
    INSERT INTO distlock_election_log (name, seq, term, value) VALUES ($1, $2, $3, $4)
)
DELETE FROM distlock_election_log WHERE name = $1 AND seq <= $2 - $5
