-- Moves a lock's row to the holding that a hand-over in memory made current (handover.rs):
-- only if the row still names the holding this client last wrote, in this boot.
-- ?1 name, ?2 row's owner, ?3 row's token, ?4 boot_id, ?5 owner now, ?6 token now, ?7 since_ms
-- affects 1 row if moved, 0 if that holding is gone (its lease ended and another took the
-- lock, or it was released by force)
UPDATE distlock_locks SET owner = ?5, token = ?6, since_ms = ?7
WHERE name = ?1 AND owner = ?2 AND token = ?3 AND boot_id = ?4
