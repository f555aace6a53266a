-- Session lock: tries the named lock on the caller's dedicated connection, without waiting.
-- params: name
-- returns: 1 taken, 0 held by another session (NULL on an error such as a killed thread).
-- GET_LOCK names are at most 64 characters and compared case-insensitively, so the key is
-- 'distlock:' and the first 55 hex digits (220 bits) of the name's SHA-256: no realistic
-- collision (see docs.md). The connection's own re-entry is not used: distlock counts holds.
SELECT GET_LOCK(CONCAT('distlock:', LEFT(SHA2(?, 256), 55)), 0)
