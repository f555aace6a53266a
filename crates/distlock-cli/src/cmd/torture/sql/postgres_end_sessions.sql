-- End the sessions whose client ports are $1 (int4[]), as an administrator would; answers how
-- many were ended. Only sessions of the same database, so a shared server's others are spared.
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
FROM pg_stat_activity
WHERE client_port = ANY($1) AND datname = current_database()
