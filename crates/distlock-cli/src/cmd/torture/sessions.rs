//! The `session-kill` fault: the database server ends a holder's connections, as an
//! administrator's `pg_terminate_backend` or `KILL`, a connection limit or a failover would.
//!
//! The holder's connections are found from outside it: its TCP connections to the database's
//! port ([`distlock_harness::sockets`]), whose local ports are what the server lists as the
//! client's ports. A session lock (`?lock=session`) ends with its session, so another worker
//! takes the lock while the holder still believes it holds it: the fence must refuse the
//! holder's late write. A lease lock outlives the session (the lease is a row): its holder
//! reconnects at its next renewal and keeps the lock.

use anyhow::{Context, Result};
use distlock::url::Scheme;
use distlock_harness::sockets::tcp_connections_of_pid;
use sqlx::{Connection, MySqlConnection, PgConnection, Row};

/// A connection of its own to the database, to end other sessions from.
pub(super) enum SessionKiller {
    Postgres(PgConnection),
    Mysql(MySqlConnection),
}

impl SessionKiller {
    /// Connects to the database `url` names (distlock's own parameters taken off); `None` for a
    /// store that is not a SQL server.
    pub(super) async fn connect(url: &str, scheme: Scheme) -> Result<Option<SessionKiller>> {
        let driver_url = distlock::url::split_parameters(url).driver_url;
        let shown = distlock::redact(url);
        Ok(match scheme {
            Scheme::Postgres => Some(SessionKiller::Postgres(
                PgConnection::connect(&driver_url)
                    .await
                    .with_context(|| format!("connecting to {shown} to end sessions"))?,
            )),
            Scheme::Mysql => {
                let driver_url = driver_url.replacen("mariadb://", "mysql://", 1);
                Some(SessionKiller::Mysql(
                    MySqlConnection::connect(&driver_url)
                        .await
                        .with_context(|| format!("connecting to {shown} to end sessions"))?,
                ))
            }
            _ => None,
        })
    }

    /// Ends every session process `pid` has with the server at `server_port`; answers how
    /// many.
    pub(super) async fn end_sessions_of(&mut self, pid: u32, server_port: u16) -> Result<u64> {
        let ports: Vec<u16> = tcp_connections_of_pid(pid)
            .into_iter()
            .filter(|c| c.remote_port == server_port)
            .map(|c| c.local_port)
            .collect();
        if ports.is_empty() {
            return Ok(0);
        }
        match self {
            SessionKiller::Postgres(conn) => {
                let ports: Vec<i32> = ports.into_iter().map(i32::from).collect();
                let ended: i64 = sqlx::query_scalar(include_str!("sql/postgres_end_sessions.sql"))
                    .bind(ports)
                    .fetch_one(&mut *conn)
                    .await
                    .context("ending a holder's PostgreSQL sessions")?;
                Ok(ended as u64)
            }
            SessionKiller::Mysql(conn) => {
                let sessions = sqlx::query(include_str!("sql/mysql_sessions.sql"))
                    .fetch_all(&mut *conn)
                    .await
                    .context("listing MySQL sessions")?;
                let mut ended = 0;
                for row in sessions {
                    let id: i64 = row.try_get(0)?;
                    let host: String = row.try_get(1)?;
                    let port = host.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
                    if port.is_some_and(|p| ports.contains(&p)) {
                        // An id is a number the server gave: nothing to quote.
                        sqlx::query(sqlx::AssertSqlSafe(format!("KILL CONNECTION {id}")))
                            .execute(&mut *conn)
                            .await
                            .context("ending a holder's MySQL session")?;
                        ended += 1;
                    }
                }
                Ok(ended)
            }
        }
    }
}
