-- Sets a semaphore's size (its first take, or Client::set_semaphore_permits), under
-- flavour_lock.sql's lock. $1 family ('sem'), $2 name, $3 permits (>= 1)
UPDATE distlock_flavours SET permits = $3 WHERE family = $1 AND name = $2
