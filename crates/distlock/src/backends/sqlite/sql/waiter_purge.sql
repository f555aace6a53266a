-- Drops the places of waiters that stopped asking (crashed, or gave up without leaving).
-- ?1 family, ?2 name, ?3 boot_id, ?4 now (CLOCK_BOOTTIME ms)
-- affects the number of places dropped
DELETE FROM distlock_waiters
WHERE family = ?1 AND name = ?2 AND (boot_id <> ?3 OR expires_ms <= ?4)
