-- Announces a change to watchers (LISTEN distlock_changed), delivered when the transaction
-- commits. $1 'e:' || election name (a new entry), 'l:' || latch name (it reached 0), or
-- 'f:' || family || ':' || name (a synchronizer's holdings, line or size changed)
SELECT pg_notify('distlock_changed', $1)
