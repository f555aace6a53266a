-- Creates a latch's row at 0 when latch_lock_row.sql found none, before it locks it. params: name
INSERT IGNORE INTO distlock_latches (name, count) VALUES (?, 0)
