//! The MySQL / MariaDB backend: lease locks in a table (the default) or session locks on
//! `GET_LOCK` (`?lock=session`). The guarantees of each are below.
//!
//! The flow is the SQL family's, written once for PostgreSQL and MySQL (`backends/sql_family/`);
//! this folder is MySQL's dialect of it:
//! * this file: [`MysqlBackend`], and the lock's statements: take, extend and release are one
//!   statement each (`sql/*.sql`), judged by the server's clock. MySQL has no `RETURNING` on
//!   an upsert, so the take and release statements report their outcome through
//!   `LAST_INSERT_ID(expr)`, which the server sends back in the same reply;
//! * `flavours.rs`, `sync.rs`: the statements of the fair lock, read-write lock and semaphore,
//!   and of elections and latches, one per step; a row a step locks is made first, outside its
//!   transaction;
//! * `inspect.rs`: status and forced release in both lock modes, and the holder columns older
//!   tables get at connect;
//! * `session.rs`: session locks on `GET_LOCK`.
//!
#![doc = include_str!("docs.md")]

mod flavours;
mod inspect;
mod session;
mod sync;

use std::time::Duration;

use async_trait::async_trait;
use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlPool, MySqlPoolOptions};

use crate::backend::{Attempt, LockRequest, Wakeups};
use crate::backends::client_rules::flavour_rules::Peek;
use crate::backends::poll_watch::{Pace, PollWatch, Wake};
use crate::backends::sql_family::{
    Dialect, Picked, Read, SqlResult, Statement, Wants, dialect_statements, sql_store,
};
use crate::error::Result;
use crate::status::{ForcedRelease, Holder};
use crate::types::FencingToken;

/// How the store connects, in code or from serde: [`SqlConfig`](crate::backends::mysql::MySqlConfig)
/// under this store's name (the PostgreSQL and MySQL stores read the same fields).
pub use crate::backends::sql_family::SqlConfig as MySqlConfig;
pub use crate::backends::sql_family::SslMode;

const NAME: &str = "mysql";

/// The take statement's "held" answers start here; smaller answers are fencing tokens.
const HELD_BASE: u64 = 1 << 62;

sql_store! {
    /// Locks in a MySQL or MariaDB database. Built by [`crate::connect`] from `mysql://…` or
    /// `mariadb://…`; `?lock=session` picks `GET_LOCK` (session) locks instead of lease rows.
    pub struct MysqlBackend(SqlBackend<MysqlDialect>) with pool MySqlPool;

    /// `url` is `mysql://user[:password]@host:port/database` (or `mariadb://…`) with the
    /// driver's parameters (`ssl-mode=REQUIRED`, `ssl-ca=…`) and distlock's:
    /// `lock=lease|session`, `max_connections=N` (pool size, default 20).
    fn connect;
}

/// MySQL's dialect; the value is the client's pollers: one per synchronizer its waiters wait
/// for.
pub(crate) struct MysqlDialect(PollWatch<Peek>);

/// MySQL cannot notify, so one poller per watched synchronizer wakes its waiters (see
/// `backends/poll_watch.rs`); other waiters poll with the core's jittered backoff (see
/// `docs.md` for why). A read is one indexed statement: it is repeated within a millisecond
/// of a change.
const WATCH_PACE: Pace = Pace {
    fastest: Duration::from_millis(1),
    slowest: Duration::from_millis(32),
    round_trips: 0,
};

#[async_trait]
impl Dialect for MysqlDialect {
    type Db = MySql;
    type Sessions = session::MySqlSessions;

    fn new(_pool: &MySqlPool) -> Self {
        MysqlDialect(PollWatch::new(WATCH_PACE, Wake::Each))
    }

    fn sessions(pool: MySqlPoolOptions, options: MySqlConnectOptions) -> session::MySqlSessions {
        session::MySqlSessions(pool.connect_lazy_with(options))
    }

    dialect_statements!();
    const NAME: &'static str = NAME;
    const PRODUCT: &'static str = "MySQL";

    async fn upgrade(pool: &MySqlPool) -> Result<()> {
        inspect::add_holder_columns(pool).await
    }

    async fn take(pool: &MySqlPool, req: &LockRequest) -> SqlResult<Attempt> {
        let done = sqlx::query(include_str!("sql/take.sql"))
            .bind(req.name.as_str().as_bytes())
            .bind(req.owner.as_str())
            .bind(req.lease.as_millis() * 1000)
            .bind(Holder::this_process_record())
            .execute(pool)
            .await?;
        let answer = done.last_insert_id();
        Ok(if answer >= HELD_BASE {
            Attempt::Held {
                retry_after: Some(Duration::from_millis(answer - HELD_BASE)),
            }
        } else {
            Attempt::leased(FencingToken(answer), req)
        })
    }

    async fn extend(pool: &MySqlPool, req: &LockRequest, token: i64) -> SqlResult<bool> {
        let lease_us = req.lease.as_millis() * 1000;
        let extend = sqlx::query(include_str!("sql/extend.sql")).bind(lease_us);
        let extend = extend
            .bind(req.name.as_str().as_bytes())
            .bind(req.owner.as_str());
        // sqlx asks for "found rows": 1 when the row matched, even if nothing changed.
        Ok(extend.bind(token).execute(pool).await?.rows_affected() == 1)
    }

    async fn release(pool: &MySqlPool, req: &LockRequest, token: Option<i64>) -> SqlResult<bool> {
        let release = sqlx::query(include_str!("sql/release.sql"));
        let release = release
            .bind(req.name.as_str().as_bytes())
            .bind(req.owner.as_str());
        // `(? IS NULL OR token = ?)`: one value, named twice.
        Ok(release
            .bind(token)
            .bind(token)
            .execute(pool)
            .await?
            .rows_affected()
            == 1)
    }

    fn select<'a>(statement: &'static str, picked: Picked<'a>) -> Statement<'a, Self> {
        inspect::selected(statement, picked)
    }

    fn entries<'a>(
        statement: &'static str,
        election: &'a str,
        after: Option<u64>,
    ) -> Statement<'a, Self> {
        // Names are VARBINARY: bound as bytes.
        let mut read = sqlx::query(statement).bind(election.as_bytes());
        if let Some(seq) = after {
            read = read.bind(seq);
        }
        read
    }

    // InnoDB's deadlock victim (error 1213) answers SQLSTATE 40001: two steps making the same
    // new row at once can meet so.
    const DEADLOCK: &'static str = "40001";

    async fn force_release(
        pool: &MySqlPool,
        sessions: bool,
        name: &str,
    ) -> SqlResult<ForcedRelease> {
        if sessions {
            inspect::force_session(pool, name.as_bytes()).await
        } else {
            inspect::force_lease(pool, name.as_bytes()).await
        }
    }

    // MySQL cannot notify a client: its waiters are woken by pollers and the core's backoff.
    const NOTIFIES: bool = false;

    async fn watch_synchronizer(
        &self,
        key: String,
        read: Read<Peek>,
        wants: Wants<Peek>,
    ) -> Result<Wakeups> {
        // MySQL cannot notify: one poller per synchronizer in this client watches for all of
        // its waiters there, and wakes the ones a change lets in.
        Ok(self.0.subscribe(key, read, wants))
    }
}
