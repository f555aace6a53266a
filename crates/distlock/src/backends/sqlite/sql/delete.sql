-- Frees a lock: only the owner's holding, and only the one with this fencing token when ?3 is
-- given (a guard's release), so an older guard never frees a newer holding of the same owner.
-- ?1 name, ?2 owner, ?3 token or NULL (release by owner token, without a guard)
-- affects 1 row if freed, 0 if that holding is gone
DELETE FROM distlock_locks WHERE name = ?1 AND owner = ?2 AND (?3 IS NULL OR token = ?3)
