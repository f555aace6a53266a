-- A synchronizer's holdings (live: the step purged first).
-- $1 family, $2 name
-- returns: side, owner, token, lease left (ms, server clock)
SELECT side, owner, token,
       ceil(EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint
FROM distlock_holdings WHERE family = $1 AND name = $2
