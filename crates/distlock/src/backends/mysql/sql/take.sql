-- Takes a lease lock, confirms the caller's own holding, or reports it held, in one statement.
-- params, bound in order: name, owner, lease in microseconds, the taker's holder record
--   (distlock::Holder)
-- returns (through the OK packet's last-insert-id, set with LAST_INSERT_ID(expr) in every branch):
--   < 2^62: the caller holds the lock now with this fencing token;
--   >= 2^62: someone else holds it, with (value - 2^62) milliseconds of lease left.
-- Invariants: the row changes owner only when its lease has ended (expires_at <= now); a
--   caller's own live holding (same owner, lease not over) keeps its token and restarts its
--   lease (re-entry is counted by the client: `holds` is 1 while held, 0 once released); a new
--   holding's token is GREATEST(the row's token + 1, the server clock in µs), and a new row's
--   (the name's first take, or the first after its row was lost: deleted, or the table made
--   anew) the clock in µs, which is above every token handed out before unless those ran ahead
--   of the clock (more than one take per µs) or the server's clock was set back (see docs.md).
--   The clock is UTC_TIMESTAMP(6) in µs since the epoch (TIMESTAMPDIFF: exact, and independent
--   of the session's time zone): about 1.8e15, far below the "held" answers' 2^62 (4.6e18).
--   MySQL applies the assignments left to right and each later one sees the earlier ones'
--   results: token and holds are computed from the old row, owner next (from the old
--   expiry), expires_at last (from the new owner: it is ours now iff we took or re-entered).
--   A new holding records its holder and start (taken_at), computed, like owner, from the old
--   expiry, so before expires_at changes; the caller's re-take keeps them.
--   UTC_TIMESTAMP(6) is the statement's start time, one value for the whole statement.
INSERT INTO distlock_locks (name, owner, holds, token, expires_at, holder, taken_at)
VALUES (?, ?, 1,
        LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))),
        UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    token = IF(expires_at <= UTC_TIMESTAMP(6),
               LAST_INSERT_ID(GREATEST(token + 1, TIMESTAMPDIFF(MICROSECOND,
                   '1970-01-01 00:00:00', UTC_TIMESTAMP(6)))),
               IF(owner = VALUES(owner),
                  LAST_INSERT_ID(token),
                  token + 0 * LAST_INSERT_ID(4611686018427387904
                      + GREATEST(0, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) DIV 1000)))),
    holds = IF(expires_at <= UTC_TIMESTAMP(6) OR owner = VALUES(owner), 1, holds),
    holder = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(holder), holder),
    taken_at = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(taken_at), taken_at),
    owner = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(owner), owner),
    expires_at = IF(owner = VALUES(owner), VALUES(expires_at), expires_at)
