-- A latch's count. params: name. No row: the latch was never set (count 0).
SELECT count FROM distlock_latches WHERE name = ?
