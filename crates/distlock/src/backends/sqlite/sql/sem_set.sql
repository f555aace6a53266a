-- Sets a semaphore's size, whatever it was (its first take, or Client::set_semaphore_permits).
-- ?1 name, ?2 permits (>= 1)
INSERT INTO distlock_semaphores (name, permits) VALUES (?1, ?2)
ON CONFLICT (name) DO UPDATE SET permits = excluded.permits
