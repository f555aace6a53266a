-- distlock's tables in the embedded SQLite file. Idempotent: run by every client at connect.
--
-- distlock_locks: one row per held lock.
--   name        the lock name, byte for byte (bound, never concatenated)
--   owner       the holder's secret owner token (32 hex digits)
--   holds       always 1: re-entry is counted by the client that holds the lock, not in the
--               file (the column stays so files made by earlier versions keep working)
--   token       fencing token of this holding
--   boot_id     the kernel boot this lease was taken in (/proc/sys/kernel/random/boot_id)
--   expires_ms  CLOCK_BOOTTIME in ms when the lease ends
--   holder      who took it: "pid<TAB>host<TAB>process" (distlock::Holder), NULL if unknown
--   since_ms    when it was taken, wall clock ms since the Unix epoch, NULL if unknown
-- A row is live only if boot_id is the current boot and expires_ms is in the future: after a
-- reboot every lease is over, and setting the wall clock moves nothing.
--
-- distlock_fencing: the last fencing token handed out per name. Never deleted, so tokens keep
-- increasing after the lock row is gone.
CREATE TABLE IF NOT EXISTS distlock_locks (
    name       TEXT PRIMARY KEY NOT NULL,
    owner      TEXT NOT NULL,
    holds      INTEGER NOT NULL CHECK (holds >= 1),
    token      INTEGER NOT NULL,
    boot_id    TEXT NOT NULL,
    expires_ms INTEGER NOT NULL,
    holder     TEXT,
    since_ms   INTEGER
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS distlock_fencing (
    name       TEXT PRIMARY KEY NOT NULL,
    last_token INTEGER NOT NULL
) WITHOUT ROWID;
