-- The live holdings of the fair locks, read-write locks and semaphores selected: named ?1, or,
-- when ?1 is NULL, every one whose name starts with ?2 (compared by characters).
-- ?3 boot_id, ?4 now (CLOCK_BOOTTIME ms)
-- returns: name, token, holder, since_ms, lease_left_ms, last_token (as status.sql), side
SELECT h.name, h.token, h.holder, h.since_ms, h.expires_ms - ?4, f.last_token, h.side
FROM distlock_holdings AS h
LEFT JOIN distlock_fencing AS f ON f.name = h.name || char(10) || h.family
WHERE (h.name = ?1 OR (?1 IS NULL AND substr(h.name, 1, length(?2)) = ?2))
  AND h.boot_id = ?3 AND h.expires_ms > ?4
ORDER BY h.name, h.side, h.token
