-- Removes every holding of one side, whoever holds it (a forced release; the step draws the
-- next token with flavour_next_token.sql in the same transaction, under flavour_lock.sql's lock).
-- $1 family, $2 name, $3 side
-- returns the removed live holdings: token, holder record, since (Unix ms), lease left (ms)
WITH removed AS (
    DELETE FROM distlock_holdings WHERE family = $1 AND name = $2 AND side = $3
    RETURNING token, holder, taken_at, expires_at
)
SELECT token, holder, floor(EXTRACT(EPOCH FROM taken_at) * 1000)::bigint,
       ceil(EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint
FROM removed WHERE expires_at > now()
