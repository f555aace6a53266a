-- Adds the holder columns to a lock table made by a version that did not record holders (run
-- once, when `holder` is missing; new files get them from schema.sql).
ALTER TABLE distlock_locks ADD COLUMN holder TEXT;
ALTER TABLE distlock_locks ADD COLUMN since_ms INTEGER;
