-- Puts a waiter in line (at the end, on its first call) or keeps its place (later calls move
-- its deadline on). Under flavour_lock.sql's lock, so seq is drawn by one step at a time.
-- $1 family, $2 name, $3 owner, $4 how long the place lasts (ms)
INSERT INTO distlock_waiters (family, name, owner, seq, expires_at)
VALUES ($1, $2, $3,
        (SELECT coalesce(max(seq), 0) + 1 FROM distlock_waiters
         WHERE family = $1 AND name = $2),
        now() + $4 * interval '1 millisecond')
ON CONFLICT (family, name, owner) DO UPDATE SET expires_at = excluded.expires_at
