-- The entries of an election's log after a seq, oldest first. params: name, seq.
-- Returns seq, term (as SIGNED, the type both dialects answer), value.
SELECT CAST(seq AS SIGNED), CAST(term AS SIGNED), value
FROM distlock_election_log WHERE name = ? AND seq > ? ORDER BY seq
