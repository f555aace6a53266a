-- Adds the holder columns to a lease-lock table made before holders were recorded (run when
-- schema_holder_missing.sql found it without them). Two clients connecting at once may both
-- run it: the second fails with "duplicate column" (1060), which the caller takes as done
-- (both columns come in one ALTER, so they exist together).
ALTER TABLE distlock_locks
    ADD COLUMN holder VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    ADD COLUMN taken_at DATETIME(6) NULL
