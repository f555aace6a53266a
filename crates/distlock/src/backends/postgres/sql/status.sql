-- The live lease holdings of the locks selected (`distlock status`): the one named $1, or, when
-- $1 is NULL, every one whose name starts with $2 (left() and length() both count characters,
-- so no LIKE wildcard needs escaping).
-- $1 name or NULL, $2 prefix
-- returns: name, token, holder record, since (Unix ms), lease left (ms, server clock), last
--   token. The row keeps the last token handed out for the name (a forced release writes its
--   advanced token there), and the next take draws above it.
SELECT name, token, holder,
       floor(EXTRACT(EPOCH FROM taken_at) * 1000)::bigint AS since_ms,
       ceil(EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::bigint AS left_ms,
       token AS last_token
FROM distlock_locks
WHERE (name = $1 OR ($1::text IS NULL AND left(name, length($2)) = $2))
  AND holds > 0 AND expires_at > now()
ORDER BY name
