-- The tables of the fair lock, the read-write lock and the semaphore. Idempotent: run by every
-- client at connect, after schema.sql, under the same transaction-scoped advisory lock (see
-- there why).
--
-- distlock_flavours: one row per synchronizer ever used, locked (flavour_lock.sql) by every step
--   that judges it, so steps on one synchronizer run one after another.
--   family    'fair', 'rw' (both sides of a read-write lock) or 'sem'
--   name      the lock name, byte for byte ("C" collation)
--   token     the last fencing token handed out (or drawn by a forced release): each new holding
--             draws GREATEST(token + 1, the server clock in µs), so a lost row restarts at the
--             clock, above the tokens handed out before (as distlock_locks.token)
--   permits   a semaphore's size, kept from its first take; NULL for the others
-- distlock_holdings: one row per holding (a fair holder, each reader, the writer, each permit)
--   side      'fair', 'read', 'write' or 'permit'; owner, token, holder, taken_at as in
--             distlock_locks; expires_at by the server's clock. Rows past expires_at are not
--             live; each judging step deletes them first.
-- distlock_waiters: places in line of fair-lock waiters (served by seq, first come first) and
--   of waiting writers (who hold new readers back). A place lapses at expires_at unless its
--   waiter asks again, so a crashed waiter holds the others up for one place's life at most.
SELECT pg_advisory_xact_lock(7235441220220052331); -- 'distlock' as a 64-bit key
CREATE TABLE IF NOT EXISTS distlock_flavours (
    family  text NOT NULL,
    name    text COLLATE "C" NOT NULL,
    token   bigint NOT NULL,
    permits integer CHECK (permits >= 1),
    PRIMARY KEY (family, name)
);
CREATE TABLE IF NOT EXISTS distlock_holdings (
    family     text NOT NULL,
    name       text COLLATE "C" NOT NULL,
    side       text NOT NULL,
    owner      text NOT NULL,
    token      bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    holder     text,
    taken_at   timestamptz NOT NULL,
    PRIMARY KEY (family, name, side, owner)
);
CREATE TABLE IF NOT EXISTS distlock_waiters (
    family     text NOT NULL,
    name       text COLLATE "C" NOT NULL,
    owner      text NOT NULL,
    seq        bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (family, name, owner)
);
