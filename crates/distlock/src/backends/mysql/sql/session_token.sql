-- Session lock: the next fencing token of a name, drawn right after GET_LOCK succeeded (so it is
-- larger than every earlier holder's). InnoDB keeps the counter across restarts.
-- params: name
-- returns: through the last-insert-id, the new token.
INSERT INTO distlock_session_tokens (name, token) VALUES (?, LAST_INSERT_ID(1))
ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)
