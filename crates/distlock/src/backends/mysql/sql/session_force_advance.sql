-- Forced release of a session lock, step 2 (after session_force_select.sql, same transaction):
-- bumps the name's session counter and clears the holder record, so every later take, whose
-- draw waits for this transaction's commit, is above it and above the removed holding.
-- params: name (bytes)
-- returns (through the last-insert-id): the counter after the advance.
INSERT INTO distlock_session_tokens (name, token, holder, taken_at, conn_id)
VALUES (?, LAST_INSERT_ID(1), NULL, NULL, NULL)
ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1), holder = NULL, taken_at = NULL,
    conn_id = NULL
