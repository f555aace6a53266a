-- Forced release of a lease lock, step 2 (after force_select.sql, same transaction): ends
-- whatever holding the row has, whoever holds it, and advances the name's fencing counter (the
-- row's token) to GREATEST(token + 1, the server clock in µs), so the next take, which draws
-- above it, is above it and above the removed holding. The old holder's next renewal finds its
-- token gone (extend.sql matches no row) and its lost() fires. A name without a row gets one,
-- with the counter at the clock in µs (see take.sql).
-- params: name (bytes)
-- returns (through the last-insert-id): the counter after the advance.
INSERT INTO distlock_locks (name, owner, holds, token, expires_at, holder, taken_at)
VALUES (?, '', 0,
        LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))),
        '1970-01-01 00:00:00', NULL, NULL)
ON DUPLICATE KEY UPDATE
    token = LAST_INSERT_ID(GREATEST(token + 1,
        TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)))),
    holds = 0, expires_at = '1970-01-01 00:00:00', holder = NULL, taken_at = NULL
