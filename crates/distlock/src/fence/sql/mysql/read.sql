-- The token a resource's fence holds, for the message of a refused write.
-- ? resource. Returns one row (token) or none.
SELECT token FROM distlock_fences WHERE resource = ?
