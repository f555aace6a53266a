-- The live session (advisory) holdings of the locks selected (`distlock status`): a recorded
-- holding counts only while pg_locks shows its connection (pid) holding the name's advisory
-- lock in this database, so a released or dead holder's leftover row is not shown.
-- $1 name or NULL (then: every name starting with $2), $2 prefix
-- returns: name, token, holder record, since (Unix ms), NULL (a session has no lease), last
--   token (the holding's: session tokens are drawn at take).
-- The bigint advisory key appears in pg_locks as classid (high 32 bits), objid (low 32 bits),
-- objsubid 1.
SELECT s.name, s.token, s.holder,
       floor(EXTRACT(EPOCH FROM s.taken_at) * 1000)::bigint AS since_ms,
       NULL::bigint AS left_ms,
       s.token AS last_token
FROM distlock_sessions AS s
CROSS JOIN LATERAL (SELECT hashtextextended(s.name, 7306915764203548012) AS k) AS key
WHERE (s.name = $1 OR ($1::text IS NULL AND left(s.name, length($2)) = $2))
  AND EXISTS (
      SELECT 1 FROM pg_locks AS l
      WHERE l.locktype = 'advisory' AND l.granted AND l.pid = s.pid AND l.objsubid = 1
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND l.classid = ((key.k >> 32) & 4294967295)::oid
        AND l.objid = (key.k & 4294967295)::oid)
ORDER BY s.name
