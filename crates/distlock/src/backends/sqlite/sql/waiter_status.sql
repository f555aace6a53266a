-- How many live waiters queue for each synchronizer selected (as flavour_status.sql).
-- ?1 name or NULL, ?2 prefix, ?3 boot_id, ?4 now (CLOCK_BOOTTIME ms)
-- returns: name, family, count
SELECT name, family, count(*) FROM distlock_waiters
WHERE (name = ?1 OR (?1 IS NULL AND substr(name, 1, length(?2)) = ?2))
  AND boot_id = ?3 AND expires_ms > ?4
GROUP BY name, family
ORDER BY name, family
