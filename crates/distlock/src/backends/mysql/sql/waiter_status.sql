-- How many live waiters queue for each synchronizer selected (as flavour_status.sql).
-- params, in order: name or NULL, the same again, prefix, the same again (both as bytes)
-- returns: name, family, count
SELECT CONVERT(name USING utf8mb4), family, CAST(COUNT(*) AS SIGNED)
FROM distlock_waiters
WHERE (name = ? OR (? IS NULL AND LEFT(name, LENGTH(?)) = ?))
  AND expires_at > UTC_TIMESTAMP(6)
GROUP BY name, family
ORDER BY name, family
