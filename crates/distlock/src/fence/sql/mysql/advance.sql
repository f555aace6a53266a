-- Fence check, step 1: raise the resource's fence to the caller's token if it is above it.
-- ? token; ? resource; ? token again (the three fence dialects bind in the same order).
-- Affects 1 row when accepted (matched and changed alike, whatever CLIENT_FOUND_ROWS says: the
-- token changes); 0 when the token is stale or the resource has no row yet.
-- Run in the caller's transaction: InnoDB keeps the row locked until its commit, so a
-- concurrent check of the same resource waits and then compares against the committed token.
UPDATE distlock_fences SET token = ? WHERE resource = ? AND token < ?
