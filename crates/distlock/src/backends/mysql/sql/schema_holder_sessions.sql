-- Adds the holder columns to a session-token table made before holders were recorded; see
-- schema_holder_locks.sql for when it runs and why a "duplicate column" error means done.
ALTER TABLE distlock_session_tokens
    ADD COLUMN holder VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    ADD COLUMN taken_at DATETIME(6) NULL,
    ADD COLUMN conn_id BIGINT UNSIGNED NULL
