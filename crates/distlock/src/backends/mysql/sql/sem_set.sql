-- Sets a semaphore's size (its first take, or Client::set_semaphore_permits), under
-- flavour_lock.sql's lock. params, in order: permits (>= 1), family ('sem'), name (bytes)
UPDATE distlock_flavours SET permits = ? WHERE family = ? AND name = ?
