-- Fence table of the fence helpers (crate::fence::SqlFence): one row per fenced resource.
-- Idempotent: run by SqlFence::install.
--
-- distlock_fences
--   resource  the caller's name for what is written to, byte for byte: VARBINARY, so no
--             collation folds case (bound, never concatenated)
--   token     the largest fencing token a write to the resource was accepted with
-- Invariant: token only grows; rows are never deleted (a deleted row would let an old token in).
CREATE TABLE IF NOT EXISTS distlock_fences (
    resource VARBINARY(512) NOT NULL PRIMARY KEY,
    token    BIGINT NOT NULL
) ENGINE = InnoDB
