-- Forced release of a session lock, step 2 (after session_force_select.sql, same transaction):
-- advances the name's session counter to GREATEST(counter + 1, the server clock in µs) (a name
-- without a row gets one at the clock in µs) and clears the holder record, so every later
-- take, whose draw waits for this transaction's commit, is above it and above the removed
-- holding.
-- params: name (bytes)
-- returns (through the last-insert-id): the counter after the advance.
INSERT INTO distlock_session_tokens (name, token, holder, taken_at, conn_id)
VALUES (?,
        LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))),
        NULL, NULL, NULL)
ON DUPLICATE KEY UPDATE
    token = LAST_INSERT_ID(GREATEST(token + 1,
        TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)))),
    holder = NULL, taken_at = NULL, conn_id = NULL
