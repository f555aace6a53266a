-- Every session of the server with its client address ('host:port'); the caller picks the
-- ones to KILL by port.
SELECT ID, HOST FROM information_schema.PROCESSLIST
