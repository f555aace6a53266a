-- A waiter gives up its place and tells the others (the one behind may be first now).
-- $1 family, $2 name, $3 owner, $4 the notice key ('f:' family ':' name)
-- returns one row if it was in line, none if not
WITH left_line AS (
    DELETE FROM distlock_waiters WHERE family = $1 AND name = $2 AND owner = $3
    RETURNING 1
)
SELECT pg_notify('distlock_changed', $4) FROM left_line
