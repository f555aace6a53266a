-- Drops the holdings of one synchronizer that are no longer live (lease over, or taken in an
-- earlier boot), before a step judges who holds it.
-- ?1 family, ?2 name, ?3 boot_id, ?4 now (CLOCK_BOOTTIME ms)
DELETE FROM distlock_holdings
WHERE family = ?1 AND name = ?2 AND (boot_id <> ?3 OR expires_ms <= ?4)
