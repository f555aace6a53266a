-- Fence check, step 1: raise the resource's fence to the caller's token if it is above it.
-- ?1 token; ?2 resource; ?3 token again (the three fence dialects bind in the same order).
-- Affects 1 row when accepted; 0 when the token is stale or the resource has no row yet.
-- Run in the caller's transaction: from this write on, the transaction holds SQLite's write
-- lock until it ends, so no other check can pass in between.
UPDATE distlock_fences SET token = ?1 WHERE resource = ?2 AND token < ?3
