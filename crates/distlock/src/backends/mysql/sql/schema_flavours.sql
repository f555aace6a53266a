-- The tables of the fair lock, the read-write lock and the semaphore (InnoDB). Idempotent: run
-- by every client at connect, after schema.sql.
--
-- distlock_flavours: one row per synchronizer ever used (never deleted), locked
--   (flavour_lock.sql, SELECT … FOR UPDATE) by every step that judges it, so steps on one
--   synchronizer run one after another.
--   family    'fair', 'rw' (both sides of a read-write lock) or 'sem'
--   name      the lock name, byte for byte (VARBINARY, as distlock_locks.name)
--   token     the last fencing token handed out (or drawn by a forced release): each new holding
--             draws GREATEST(token + 1, the server clock in µs), so a lost row restarts at the
--             clock, above the tokens handed out before (as distlock_locks.token)
--   permits   a semaphore's size, kept from its first take; NULL for the others
-- distlock_holdings: one row per holding (a fair holder, each reader, the writer, each permit);
--   side 'fair', 'read', 'write' or 'permit'; expires_at UTC by the server's clock. Rows past
--   expires_at are not live; each judging step deletes them first.
-- distlock_waiters: places in line of fair-lock waiters (served by seq, first come first) and of
--   waiting writers (who hold new readers back); a place lapses at expires_at unless its waiter
--   asks again, so a crashed waiter holds the others up for one place's life at most.
CREATE TABLE IF NOT EXISTS distlock_flavours (
    family  VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    name    VARBINARY(512) NOT NULL,
    token   BIGINT UNSIGNED NOT NULL,
    permits INT UNSIGNED NULL,
    PRIMARY KEY (family, name)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS distlock_holdings (
    family     VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    name       VARBINARY(512) NOT NULL,
    side       VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    owner      CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    token      BIGINT UNSIGNED NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    holder     VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    taken_at   DATETIME(6) NOT NULL,
    PRIMARY KEY (family, name, side, owner)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS distlock_waiters (
    family     VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    name       VARBINARY(512) NOT NULL,
    owner      CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    seq        BIGINT UNSIGNED NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    PRIMARY KEY (family, name, owner)
) ENGINE = InnoDB;
