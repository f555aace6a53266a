-- Session lock: frees the named lock held by this connection.
-- params: name
-- returns: 1 released, 0 held by another session, NULL if nobody held it.
SELECT RELEASE_LOCK(CONCAT('distlock:', LEFT(SHA2(?, 256), 55)))
