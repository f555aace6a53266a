-- Optimistic write of a counter slot: only if nobody wrote it since the caller read `version`.
-- params: ?1 slot, ?2 new value, ?3 version the caller read
-- returns: rows affected, 1 if the swap happened, 0 on a conflict (the caller retries)
UPDATE demo_counter SET value = ?2, version = version + 1 WHERE slot = ?1 AND version = ?3;
