-- Fence table of the fence helpers (crate::fence::SqlFence), in the caller's SQLite database
-- (reached through sqlx, not the lock backend's file). Idempotent: run by SqlFence::install.
--
-- distlock_fences
--   resource  the caller's name for what is written to (bound, never concatenated)
--   token     the largest fencing token a write to the resource was accepted with
-- Invariant: token only grows; rows are never deleted (a deleted row would let an old token in).
CREATE TABLE IF NOT EXISTS distlock_fences (
    resource TEXT PRIMARY KEY NOT NULL,
    token    INTEGER NOT NULL
)
