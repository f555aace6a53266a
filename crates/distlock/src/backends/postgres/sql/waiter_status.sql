-- How many live waiters queue for each synchronizer selected (as flavour_status.sql).
-- $1 name or NULL, $2 prefix
-- returns: name, family, count
SELECT name, family, count(*)
FROM distlock_waiters
WHERE (name = $1 OR ($1::text IS NULL AND left(name, length($2)) = $2))
  AND expires_at > now()
GROUP BY name, family
ORDER BY name, family
