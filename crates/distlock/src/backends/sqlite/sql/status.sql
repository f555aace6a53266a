-- The live holdings of the locks selected: the one named ?1, or, when ?1 is NULL, every one
-- whose name starts with ?2 (compared by characters: substr and length count the same units).
-- ?3 boot_id, ?4 now (CLOCK_BOOTTIME ms)
-- returns: name, token, holder, since_ms, lease_left_ms, last_token
SELECT l.name, l.token, l.holder, l.since_ms, l.expires_ms - ?4, f.last_token
FROM distlock_locks AS l LEFT JOIN distlock_fencing AS f ON f.name = l.name
WHERE (l.name = ?1 OR (?1 IS NULL AND substr(l.name, 1, length(?2)) = ?2))
  AND l.boot_id = ?3 AND l.expires_ms > ?4
ORDER BY l.name
