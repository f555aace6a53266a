-- Session lock: the next fencing token of a name, drawn right after GET_LOCK succeeded (so it is
-- larger than every earlier holder's). InnoDB keeps the counter across restarts. The row also
-- records who holds the lock now (holder record, start, this connection's id), for `distlock
-- status` and a forced release on other connections; only the lock's holder writes it.
-- params: name, the taker's holder record (distlock::Holder)
-- returns: through the last-insert-id, the new token.
INSERT INTO distlock_session_tokens (name, token, holder, taken_at, conn_id)
VALUES (?, LAST_INSERT_ID(1), ?, UTC_TIMESTAMP(6), CONNECTION_ID())
ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1), holder = VALUES(holder),
    taken_at = VALUES(taken_at), conn_id = VALUES(conn_id)
