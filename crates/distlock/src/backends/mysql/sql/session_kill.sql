-- Forced release of a session lock, step 3 (before the commit): ends the connection holding
-- the lock, which frees it; its holder's next ping fails and its lost() fires. Needs the right
-- to kill other users' connections (CONNECTION_ADMIN or SUPER) unless it is the same user.
-- params: the connection id (from IS_USED_LOCK)
-- fails with 1094 (unknown thread) when that connection already ended: the lock is free then.
KILL CONNECTION ?
