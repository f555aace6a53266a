-- Locks and reads an election's row (made by elect_create.sql), so concurrent writers of one
-- election take turns. Run inside the writing transaction. $1 name. Returns seq, term, value.
SELECT seq, term, value FROM distlock_elections WHERE name = $1 FOR UPDATE
