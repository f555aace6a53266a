-- The token a resource's fence holds, for the message of a refused write.
-- ?1 resource. Returns one row (token) or none.
SELECT token FROM distlock_fences WHERE resource = ?1
