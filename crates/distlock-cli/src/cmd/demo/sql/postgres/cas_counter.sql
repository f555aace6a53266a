-- Optimistic write of a counter slot: only if nobody wrote it since the caller read `version`.
-- params: $1 new value, $2 slot, $3 version the caller read
-- returns: rows affected, 1 if the swap happened, 0 on a conflict (the caller retries)
UPDATE demo_counter SET value = $1, version = version + 1 WHERE slot = $2 AND version = $3;
