-- A synchronizer's live holdings and line, dropping the lapsed ones, in one statement (under
-- flavour_lock.sql's row lock). The deletes and the reads see the same snapshot, so the reads
-- skip the lapsed rows themselves.
-- $1 family, $2 name
-- returns rows of (what, side, owner, number, left_ms):
--   ('h', side, owner, token, lease left ms)   each live holding
--   ('w', NULL, owner, seq, place left ms)      each live place in line, by seq
--   ('x', NULL, NULL, places dropped, NULL)     one row: how many lapsed places were dropped
WITH lapsed_holdings AS (
    DELETE FROM distlock_holdings WHERE family = $1 AND name = $2 AND expires_at <= now()
    RETURNING 1
), lapsed_places AS (
    DELETE FROM distlock_waiters WHERE family = $1 AND name = $2 AND expires_at <= now()
    RETURNING 1
)
SELECT 'h' AS what, side, owner, token AS number,
       ceil(EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint AS left_ms
FROM distlock_holdings WHERE family = $1 AND name = $2 AND expires_at > now()
UNION ALL
SELECT 'w', NULL, owner, seq, ceil(EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint
FROM distlock_waiters WHERE family = $1 AND name = $2 AND expires_at > now()
UNION ALL
SELECT 'x', NULL, NULL, (SELECT count(*) FROM lapsed_places)
                        + 0 * (SELECT count(*) FROM lapsed_holdings), NULL
ORDER BY 1, 4
