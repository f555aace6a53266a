-- Locks and reads an election's row, so concurrent writers of one election take turns. Run
-- inside the writing transaction. params: name. Returns seq, term, value.
SELECT seq, term, value FROM distlock_elections WHERE name = ? FOR UPDATE
