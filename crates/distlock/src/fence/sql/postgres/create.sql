-- Fence check, step 2 (first write to a resource): create its row with the caller's token.
-- $1 resource; $2 token.
-- Affects 1 row when created (accepted); 0 when the row exists (a concurrent first writer
-- created it: step 1 is tried once more).
INSERT INTO distlock_fences (resource, token) VALUES ($1, $2) ON CONFLICT (resource) DO NOTHING
