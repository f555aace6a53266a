-- distlock's objects in PostgreSQL. Idempotent: run by every client at connect.
--
-- distlock_locks: one row per lock name ever used; a released lock keeps its row (holds = 0,
--   expiry the epoch), so the row lock that orders takers also orders their fencing tokens.
--   name        the lock name, byte for byte (bound, never concatenated; "C" collation: equality
--               is by bytes, no case folding)
--   owner       the holder's secret owner token (32 hex digits)
--   holds       1 while held, 0 once released (re-entry is counted by the holding client)
--   token       fencing token of the current (or last) holding, or the fence of a forced
--               release: the name's counter
--   expires_at  when the lease ends, by the database server's clock
--   holder      who took the current holding: distlock::Holder's record (pid, host, process),
--               for `distlock status`; NULL in rows written before holders were recorded
--   taken_at    when the current holding began (server clock); a re-take keeps it
-- Fencing tokens are counted per name in the name's row (distlock_locks.token,
--   distlock_sessions.token): each new holding draws GREATEST(last + 1, the server clock in µs),
--   so a row that is lost (deleted, or the table made anew) restarts at the clock, above the
--   tokens handed out before (docs.md says when not). Versions before drew from a sequence,
--   distlock_fencing, which this one neither creates nor uses.
-- distlock_sessions: who holds each session (advisory) lock, written by the take, for `distlock
--   status` and a forced release: name, token (drawn at take: the name's counter), pid
--   (pg_backend_pid() of the holding connection), holder record, taken_at. A row describes a
--   live holding only while pg_locks shows that pid holding the name's advisory lock: a released
--   or dead holder's row stays until the next take overwrites it; a forced release sets pid 0
--   (no backend's) and keeps the row for its counter.
-- Clients creating the objects at once would race in the catalog ("duplicate key value violates
-- unique constraint pg_type_typname_nsp_index", IF NOT EXISTS notwithstanding): one at a time,
-- under a transaction-scoped advisory lock (this string runs as one implicit transaction).
SELECT pg_advisory_xact_lock(7235441220220052331); -- 'distlock' as a 64-bit key
CREATE TABLE IF NOT EXISTS distlock_locks (
    name       text COLLATE "C" PRIMARY KEY,
    owner      text NOT NULL,
    holds      integer NOT NULL CHECK (holds >= 0),
    token      bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    holder     text,
    taken_at   timestamptz
);
-- Tables made before holders were recorded get the columns. Checked in the catalog first: an
-- ALTER TABLE, even one that changes nothing, takes an exclusive lock on the table, and every
-- client runs this at connect.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'distlock_locks'::regclass AND attname = 'holder'
                     AND NOT attisdropped) THEN
        ALTER TABLE distlock_locks ADD COLUMN IF NOT EXISTS holder text,
                                   ADD COLUMN IF NOT EXISTS taken_at timestamptz;
    END IF;
END
$$;
CREATE TABLE IF NOT EXISTS distlock_sessions (
    name     text COLLATE "C" PRIMARY KEY,
    token    bigint NOT NULL,
    pid      integer NOT NULL,
    holder   text,
    taken_at timestamptz NOT NULL
);
