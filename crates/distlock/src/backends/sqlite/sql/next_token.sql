-- Hands out the next fencing token of a name: one more than the last, and never below the
-- floor the caller passes (the wall clock in microseconds). The floor keeps tokens increasing
-- even if the file lost its last commits in a power cut (synchronous=NORMAL).
-- ?1 name, ?2 floor
-- returns: last_token (the new token)
INSERT INTO distlock_fencing (name, last_token) VALUES (?1, MAX(1, ?2))
ON CONFLICT (name) DO UPDATE SET last_token = MAX(last_token + 1, ?2)
RETURNING last_token
