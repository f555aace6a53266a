-- Row lock without waiting (MySQL 8.0+, MariaDB 10.3+): fails at once if another transaction
-- holds the row (MySQL error 3572, MariaDB 1205).
-- params: name
SELECT name FROM distlock_row_locks WHERE name = ? FOR UPDATE NOWAIT
