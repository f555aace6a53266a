-- Hands out the next fencing token of a name: one more than the last, and never below the
-- floor the caller passes (the wall clock in microseconds), and reserves the ?3 tokens after
-- it for hand-overs in memory in the taking client (handover.rs): the counter is left at the
-- last one reserved, so every later take, in any process, draws above them. The floor keeps
-- tokens increasing even if the file lost its last commits in a power cut (synchronous=NORMAL).
-- ?1 name, ?2 floor, ?3 tokens to reserve
-- returns: the new token
INSERT INTO distlock_fencing (name, last_token) VALUES (?1, MAX(1, ?2) + ?3)
ON CONFLICT (name) DO UPDATE SET last_token = MAX(last_token + 1, ?2) + ?3
RETURNING last_token - ?3
