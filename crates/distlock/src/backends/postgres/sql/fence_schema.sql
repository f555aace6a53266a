-- Fence table of the fence helpers (crate::fence::SqlFence): one row per fenced resource.
-- Idempotent: run by SqlFence::install.
--
-- distlock_fences
--   resource  the caller's name for what is written to (bound, never concatenated)
--   token     the largest fencing token a write to the resource was accepted with
-- Invariant: token only grows; rows are never deleted (a deleted row would let an old token in).
CREATE TABLE IF NOT EXISTS distlock_fences (
    resource TEXT PRIMARY KEY,
    token    BIGINT NOT NULL
)
