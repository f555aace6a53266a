-- Draws a synchronizer's next fencing token (under flavour_lock.sql's lock): one more than the
-- last, never below the server clock in µs (see schema_flavours.sql).
-- params: family, name (bytes)
-- returns (through the last-insert-id): the new token
UPDATE distlock_flavours
SET token = LAST_INSERT_ID(GREATEST(token + 1,
    TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))))
WHERE family = ? AND name = ?
