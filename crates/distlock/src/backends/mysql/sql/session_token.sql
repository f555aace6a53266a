-- Session lock: the next fencing token of a name, GREATEST(its last + 1, the server clock in
-- µs), drawn right after GET_LOCK succeeded (so it is larger than every earlier holder's); a
-- name without a row (new, or its row lost) starts at the clock in µs (see take.sql for why
-- that is above every token handed out before). InnoDB keeps the counter across restarts.
-- The row also records who holds the lock now (holder record, start, this connection's id),
-- for `distlock status` and a forced release on other connections; only the lock's holder (and
-- a forced release, which a new holder's write waits for) writes it.
-- params: name, the taker's holder record (distlock::Holder)
-- returns: through the last-insert-id, the new token.
INSERT INTO distlock_session_tokens (name, token, holder, taken_at, conn_id)
VALUES (?,
        LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))),
        ?, UTC_TIMESTAMP(6), CONNECTION_ID())
ON DUPLICATE KEY UPDATE
    token = LAST_INSERT_ID(GREATEST(token + 1,
        TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)))),
    holder = VALUES(holder), taken_at = VALUES(taken_at), conn_id = VALUES(conn_id)
