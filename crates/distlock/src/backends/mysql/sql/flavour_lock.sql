-- Locks a synchronizer's row for the rest of the transaction: the step runs alone.
-- params: family, name (bytes)
-- returns: token (the last handed out), permits (a semaphore's size, or NULL); no row if the
--   row does not exist yet (flavour_create.sql makes it)
SELECT CAST(token AS SIGNED), CAST(permits AS SIGNED)
FROM distlock_flavours WHERE family = ? AND name = ?
FOR UPDATE
