-- The tables of the fair lock, the read-write lock and the semaphore. Idempotent: run by every
-- client at connect, after schema.sql.
--
-- distlock_holdings: one row per live holding of a flavour other than the plain lock.
--   family      'fair', 'rw' (both sides of a read-write lock) or 'sem': which synchronizer
--   name        the lock name, byte for byte (bound, never concatenated)
--   side        'fair', 'read', 'write' or 'permit'
--   owner       the holder's secret owner token
--   token       fencing token of this holding (from distlock_fencing, key name || x'0a' || family)
--   boot_id, expires_ms, holder, since_ms   as in distlock_locks (schema.sql)
--   An owner has at most one holding per side; a writer may also hold the read side.
-- distlock_waiters: the places of waiters that queue in the file: fair-lock waiters (served by
--   seq, first come first) and waiting writers (who hold new readers back).
--   seq         arrival order within (family, name)
--   expires_ms  CLOCK_BOOTTIME ms by which the waiter must ask again, or its place is dropped:
--               a crashed waiter holds up the others for one waiter lease at most
-- distlock_semaphores: each semaphore's size, kept from its first take; changed only by
--   Client::set_semaphore_permits (sem_set.sql).
-- Invariant: rows of another boot or past expires_ms are not live; every step purges them
-- (flavour_purge.sql, waiter_purge.sql) before judging, in the same transaction.
CREATE TABLE IF NOT EXISTS distlock_holdings (
    family     TEXT NOT NULL,
    name       TEXT NOT NULL,
    side       TEXT NOT NULL,
    owner      TEXT NOT NULL,
    token      INTEGER NOT NULL,
    boot_id    TEXT NOT NULL,
    expires_ms INTEGER NOT NULL,
    holder     TEXT,
    since_ms   INTEGER,
    PRIMARY KEY (family, name, side, owner)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS distlock_waiters (
    family     TEXT NOT NULL,
    name       TEXT NOT NULL,
    owner      TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    boot_id    TEXT NOT NULL,
    expires_ms INTEGER NOT NULL,
    PRIMARY KEY (family, name, owner)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS distlock_semaphores (
    name    TEXT PRIMARY KEY NOT NULL,
    permits INTEGER NOT NULL CHECK (permits >= 1)
) WITHOUT ROWID;
