-- Fence check, step 2 (first write to a resource): create its row with the caller's token.
-- ? resource; ? token.
-- Affects 1 row when created (accepted); 0 when the row exists (a concurrent first writer
-- created it: step 1 is tried once more).
INSERT IGNORE INTO distlock_fences (resource, token) VALUES (?, ?)
