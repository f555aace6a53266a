-- Fence table of the fence helpers (crate::fence::SqlFence): one row per fenced resource.
-- Idempotent: run by SqlFence::install.
--
-- distlock_fences
--   resource  the caller's name for what is written to (bound, never concatenated)
--   token     the largest fencing token a write to the resource was accepted with
-- Invariant: token only grows; rows are never deleted (a deleted row would let an old token in).
-- Clients creating the objects at once would race in the catalog ("duplicate key value violates
-- unique constraint pg_type_typname_nsp_index", IF NOT EXISTS notwithstanding): one at a time,
-- under a transaction-scoped advisory lock (this string runs as one implicit transaction).
SELECT pg_advisory_xact_lock(7235441220220052331); -- 'distlock' as a 64-bit key
CREATE TABLE IF NOT EXISTS distlock_fences (
    resource TEXT PRIMARY KEY,
    token    BIGINT NOT NULL
)
