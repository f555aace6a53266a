-- The size a semaphore keeps. ?1 name. Returns permits, or no row (never used).
SELECT permits FROM distlock_semaphores WHERE name = ?1
