-- Announces a change to watchers (LISTEN distlock_changed), delivered when the transaction
-- commits. $1 'e:' || election name (a new entry) or 'l:' || latch name (it reached 0)
SELECT pg_notify('distlock_changed', $1)
