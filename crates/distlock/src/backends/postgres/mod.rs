//! The PostgreSQL backend: lease locks in a table (the default) or session locks on advisory
//! locks (`?lock=session`). The guarantees of each are below.
//!
//! The flow is the SQL family's, written once for PostgreSQL and MySQL (`backends/sql_family/`);
//! this folder is PostgreSQL's dialect of it:
//! * this file: [`PostgresBackend`], and the lock's statements: take, extend and release are
//!   one statement each (`sql/*.sql`), judged by the server's clock; a status and a forced
//!   release are one statement in each lock mode;
//! * `flavours.rs`, `sync.rs`: the statements of the fair lock, read-write lock and semaphore,
//!   and of elections and latches; data-modifying `WITH` lets most steps be one statement;
//! * `notify.rs`: waiters of every lock on one client share one listening connection
//!   (`LISTEN distlock_released`, `distlock_changed`); every release, leaver, resize, new
//!   election entry and latch reaching 0 notifies in its own transaction;
//! * `session.rs`: session locks on advisory locks.
//!
#![doc = include_str!("docs.md")]

mod flavours;
mod notify;
mod session;
mod sync;

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, Postgres};

use crate::backend::{Attempt, LockRequest, Wakeups};
use crate::backends::client_rules::flavour_rules::Peek;
use crate::backends::sql_family::{
    Dialect, Picked, Read, SqlResult, Statement, Wants, dialect_statements, inspect, sql_store,
};
use crate::error::Result;
use crate::status::{ForcedRelease, Holder};
use crate::types::{FencingToken, LockName};

/// How the store connects, in code or from serde: [`SqlConfig`](crate::backends::postgres::PostgresConfig)
/// under this store's name (the PostgreSQL and MySQL stores read the same fields).
pub use crate::backends::sql_family::SqlConfig as PostgresConfig;
pub use crate::backends::sql_family::SslMode;

const NAME: &str = "postgres";

sql_store! {
    /// Locks in a PostgreSQL database. Built by [`crate::connect`] from `postgres://…` or
    /// `postgresql://…`; `?lock=session` picks advisory (session) locks instead of lease rows.
    pub struct PostgresBackend(SqlBackend<PostgresDialect>) with pool PgPool;

    /// `url` is `postgres://user[:password]@host:port/database` with the driver's parameters
    /// (`sslmode=require`, `options=…`) and distlock's: `lock=lease|session`,
    /// `max_connections=N` (pool size, default 20).
    fn connect;
}

/// PostgreSQL's dialect; the value is the client's listening connection.
pub(crate) struct PostgresDialect(notify::Releases);

#[async_trait]
impl Dialect for PostgresDialect {
    type Db = Postgres;
    type Sessions = session::PgSessions;

    fn new(pool: &PgPool) -> Self {
        PostgresDialect(notify::Releases::new(pool.clone()))
    }

    fn sessions(pool: PgPoolOptions, options: PgConnectOptions) -> session::PgSessions {
        // Whatever path gave the connection back, it holds no lock afterwards.
        let pool = pool.after_release(|conn, _| {
            Box::pin(async move {
                sqlx::query("SELECT pg_advisory_unlock_all()")
                    .execute(conn)
                    .await?;
                Ok(true)
            })
        });
        session::PgSessions(pool.connect_lazy_with(options))
    }

    dialect_statements!();
    const NAME: &'static str = NAME;
    const PRODUCT: &'static str = "PostgreSQL";

    async fn take(pool: &PgPool, req: &LockRequest) -> SqlResult<Attempt> {
        let row = sqlx::query(include_str!("sql/take.sql"))
            .bind(req.name.as_str())
            .bind(req.owner.as_str())
            .bind(req.lease.as_millis() as i64)
            .bind(Holder::this_process_record())
            .fetch_optional(pool)
            .await?;
        let Some(row) = row else {
            return Ok(Attempt::Held { retry_after: None });
        };
        Ok(match row.try_get::<Option<i64>, _>(0)? {
            Some(token) => Attempt::leased(FencingToken(token as u64), req),
            None => Attempt::Held {
                retry_after: row
                    .try_get::<Option<i64>, _>(1)?
                    .map(|ms| Duration::from_millis(ms.max(0) as u64)),
            },
        })
    }

    async fn extend(pool: &PgPool, req: &LockRequest, token: i64) -> SqlResult<bool> {
        let done = sqlx::query(include_str!("sql/extend.sql"))
            .bind(req.name.as_str())
            .bind(req.owner.as_str())
            .bind(req.lease.as_millis() as i64)
            .bind(token)
            .execute(pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn release(pool: &PgPool, req: &LockRequest, token: Option<i64>) -> SqlResult<bool> {
        let freed = sqlx::query(include_str!("sql/release.sql"))
            .bind(req.name.as_str())
            .bind(req.owner.as_str())
            .bind(token)
            .fetch_optional(pool)
            .await?;
        Ok(freed.is_some())
    }

    fn select<'a>(statement: &'static str, picked: Picked<'a>) -> Statement<'a, Self> {
        sqlx::query(statement).bind(picked.name).bind(picked.prefix)
    }

    fn entries<'a>(
        statement: &'static str,
        election: &'a str,
        after: Option<u64>,
    ) -> Statement<'a, Self> {
        let read = sqlx::query(statement).bind(election);
        match after {
            Some(seq) => read.bind(seq as i64),
            None => read,
        }
    }

    // deadlock_detected: each step locks its one row first, so none is expected; retried if so.
    const DEADLOCK: &'static str = "40P01";

    async fn force_release(pool: &PgPool, sessions: bool, name: &str) -> SqlResult<ForcedRelease> {
        // One statement either way: nothing to run again, nothing to leave half done.
        let statement = if sessions {
            include_str!("sql/session_force_release.sql")
        } else {
            include_str!("sql/force_release.sql")
        };
        let row = sqlx::query(statement).bind(name).fetch_one(pool).await?;
        inspect::forced(&row)
    }

    async fn changed(conn: &mut PgConnection, key: &str) -> SqlResult<()> {
        sqlx::query(include_str!("sql/notify_changed.sql"))
            .bind(key)
            .execute(conn)
            .await
            .map(drop)
    }

    // Every release, leaver, resize, new election entry and latch reaching 0 notifies.
    const NOTIFIES: bool = true;

    async fn watch_free(&self, name: &LockName) -> Result<Wakeups> {
        self.0.watch(name).await
    }

    async fn watch_changes(&self, key: String) -> Result<Wakeups> {
        self.0.watch_changes(key).await
    }

    async fn watch_synchronizer(
        &self,
        key: String,
        _read: Read<Peek>,
        _wants: Wants<Peek>,
    ) -> Result<Wakeups> {
        // Every change notifies: nothing to poll.
        self.0.watch_changes(key).await
    }
}
