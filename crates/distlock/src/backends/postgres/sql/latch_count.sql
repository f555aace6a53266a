-- A latch's count. $1 name. No row: the latch was never set (count 0).
SELECT count FROM distlock_latches WHERE name = $1
