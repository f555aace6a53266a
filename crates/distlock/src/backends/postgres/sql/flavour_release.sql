-- Frees one holding, the owner's (only the one with token $5 when given), and tells the
-- synchronizer's waiters (delivered at commit).
-- $1 family, $2 name, $3 side, $4 owner, $5 token or NULL, $6 the notice key ('f:' family ':' name)
-- returns one row if freed, none if that holding is gone (nothing changed, nobody told)
WITH released AS (
    DELETE FROM distlock_holdings
    WHERE family = $1 AND name = $2 AND side = $3 AND owner = $4
      AND ($5::bigint IS NULL OR token = $5)
    RETURNING 1
)
SELECT pg_notify('distlock_changed', $6) FROM released
