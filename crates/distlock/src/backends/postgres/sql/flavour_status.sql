-- The live holdings of the fair locks, read-write locks and semaphores selected: named $1, or,
-- when $1 is NULL, every one whose name starts with $2 (as status.sql).
-- returns: name, side, token, holder record, since (Unix ms), lease left (ms), last token,
--   permits (a semaphore's size as bigint, the type both dialects answer; NULL for the
--   others); ordered by name, side, token
SELECT h.name, h.side, h.token, h.holder,
       floor(EXTRACT(EPOCH FROM h.taken_at) * 1000)::bigint,
       ceil(EXTRACT(EPOCH FROM (h.expires_at - now())) * 1000)::bigint,
       f.token, f.permits::bigint
FROM distlock_holdings AS h
JOIN distlock_flavours AS f ON f.family = h.family AND f.name = h.name
WHERE (h.name = $1 OR ($1::text IS NULL AND left(h.name, length($2)) = $2))
  AND h.expires_at > now()
ORDER BY h.name, h.side, h.token
