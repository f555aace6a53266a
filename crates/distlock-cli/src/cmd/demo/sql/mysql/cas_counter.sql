-- Optimistic write of a counter slot: only if nobody wrote it since the caller read `version`.
-- params (in order): new value, slot, version the caller read
-- returns: rows affected, 1 if the swap happened, 0 on a conflict (the caller retries)
UPDATE demo_counter SET value = ?, version = version + 1 WHERE slot = ? AND version = ?;
