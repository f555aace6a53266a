//! The PostgreSQL backend: lease locks in a table (the default) or session locks on advisory
//! locks (`?lock=session`). The guarantees of each are below.
//!
//! Lease locks: take, extend and release are one statement each (`sql/*.sql`), judged by the
//! server's clock. Waiters of every lock on one client share one listening connection
//! (`LISTEN distlock_released`); the release statement notifies in the same transaction.
//! The fair lock, the read-write lock and the semaphore (lease mode only) are one transaction
//! per step over their own tables (`flavours.rs`), judged by the rules the SQL stores share.
//!
#![doc = include_str!("docs.md")]

mod config;
mod flavours;
mod notify;
mod session;
mod sync;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::backend::{
    Attempt, Backend, Capabilities, ElectionEntry, LockRequest, PermitCount, Waiter, Wakeups,
};
use crate::backends::client_rules::flavour_rules::{self, Side};
use crate::backends::sql_family::session::Sessions;
use crate::backends::client_rules::flavour_waiter::SqlFlavourWaiter;
use crate::backends::sql_family::inspect as sql_inspect;
use crate::backends::sql_family::url::{self as sql_url, LockMode};
use crate::sqlx_support::error::from_sqlx;
use crate::sqlx_support::tx;
use crate::error::{Error, Result};
use crate::options::Options;
use crate::status::{ForcedRelease, Holder, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName};

const NAME: &str = "postgres";

/// How long a call waits for a free pooled connection before failing with a connection error.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Locks in a PostgreSQL database. Built by [`crate::connect`] from `postgres://…` or
/// `postgresql://…`; `?lock=session` picks advisory (session) locks instead of lease rows.
pub struct PostgresBackend {
    pool: PgPool,
    url: String,
    releases: Arc<notify::Releases>,
    sessions: Option<Sessions<session::PgSessions>>,
    flavours: Arc<flavours::PgFlavours>,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("url", &self.url)
            .field("session_locks", &self.sessions.is_some())
            .finish()
    }
}

fn err(what: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
    move |e| from_sqlx(NAME, what, e)
}

impl PostgresBackend {
    /// Connects to the database `url` names and creates distlock's tables if missing.
    ///
    /// `url` is `postgres://user[:password]@host:port/database` with the driver's parameters
    /// (`sslmode=require`, `options=…`) and distlock's: `lock=lease|session`,
    /// `max_connections=N` (pool size, default 20).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &Options::default()).await
    }

    /// [`connect`](Self::connect) with [`Options`]: `connect_timeout` bounds getting a pooled
    /// connection, `response_timeout` a session lock's liveness ping.
    pub async fn connect_with(url: &str, options: &Options) -> Result<Self> {
        let acquire_timeout = options.connect_timeout.unwrap_or(ACQUIRE_TIMEOUT);
        let cfg = config::parse(url)?;
        sql_url::probe(NAME, &cfg).await?;
        let pool = PgPoolOptions::new()
            // One more than asked: the listening connection of waiters lives in the pool too.
            .max_connections(cfg.url.max_connections + 1)
            .acquire_timeout(acquire_timeout)
            .connect_lazy_with(cfg.options.clone());
        sqlx::raw_sql(include_str!("sql/schema.sql"))
            .execute(&pool)
            .await
            .map_err(err("creating the lock tables"))?;
        sqlx::raw_sql(include_str!("sql/schema_sync.sql"))
            .execute(&pool)
            .await
            .map_err(err("creating the election and latch tables"))?;
        sqlx::raw_sql(include_str!("sql/schema_flavours.sql"))
            .execute(&pool)
            .await
            .map_err(err("creating the fair, read-write and semaphore tables"))?;
        let sessions = match cfg.url.mode {
            LockMode::Lease => None,
            LockMode::Session => Some(Sessions::new(
                session::PgSessions(
                    PgPoolOptions::new()
                        .max_connections(cfg.url.max_connections)
                        .acquire_timeout(acquire_timeout)
                        // Whatever path gave the connection back, it holds no lock afterwards.
                        .after_release(|conn, _| {
                            Box::pin(async move {
                                sqlx::query("SELECT pg_advisory_unlock_all()")
                                    .execute(conn)
                                    .await?;
                                Ok(true)
                            })
                        })
                        .connect_lazy_with(cfg.options),
                ),
                options,
            )),
        };
        let releases = Arc::new(notify::Releases::new(pool.clone()));
        Ok(PostgresBackend {
            flavours: Arc::new(flavours::PgFlavours {
                pool: pool.clone(),
                releases: releases.clone(),
            }),
            releases,
            pool,
            url: cfg.url.redacted,
            sessions,
        })
    }

    /// The connection pool, for the row-lock API and the caller's own queries.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl Backend for PostgresBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        let base = if self.sessions.is_some() {
            Capabilities::sessions(None, crate::backends::sql_family::session::NO_LEASE)
        } else {
            Capabilities::leases()
        };
        base.notifying().electing_and_latching().inspecting()
    }

    fn supports(&self, kind: LockKind) -> bool {
        // Advisory locks are exclusive locks of a connection: no queue, no shared side, no count.
        match self.sessions {
            Some(_) => kind == LockKind::Mutex,
            None => kind.is_any_flavour(),
        }
    }

    fn refusal(&self, kind: LockKind) -> Error {
        if self.sessions.is_some() && kind.is_any_flavour() {
            return flavour_rules::session_refusal(NAME, kind);
        }
        Error::unsupported(NAME, kind)
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        if let Some(sessions) = &self.sessions {
            return sessions.try_take(req).await;
        }
        if let Some(side) = Side::of(req.kind) {
            // A one-off attempt never joins a queue (the waiter does).
            return self.flavours.take_side(req, side, false).await;
        }
        let row = sqlx::query(include_str!("sql/take.sql"))
            .bind(req.name.as_str())
            .bind(req.owner.as_str())
            .bind(req.lease.as_millis() as i64)
            .bind(Holder::this_process_record())
            .fetch_optional(&self.pool)
            .await
            .map_err(err("taking the lock"))?;
        let Some(row) = row else {
            return Ok(Attempt::Held { retry_after: None });
        };
        match row.get::<Option<i64>, _>(0) {
            Some(token) => Ok(Attempt::leased(FencingToken(token as u64), req)),
            None => Ok(Attempt::Held {
                retry_after: row
                    .get::<Option<i64>, _>(1)
                    .map(|ms| Duration::from_millis(ms.max(0) as u64)),
            }),
        }
    }

    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<Option<Duration>> {
        if let Some(sessions) = &self.sessions {
            // A session holding has no lease; the duration is not used.
            let held = sessions.still_held(req, token).await?;
            return Ok(held.then_some(Duration::ZERO));
        }
        if let Some(side) = Side::of(req.kind) {
            let held = self.flavours.extend(req, side, token).await?;
            return Ok(held.then(|| req.lease.duration()));
        }
        let done = sqlx::query(include_str!("sql/extend.sql"))
            .bind(req.name.as_str())
            .bind(req.owner.as_str())
            .bind(req.lease.as_millis() as i64)
            .bind(token.get() as i64)
            .execute(&self.pool)
            .await
            .map_err(err("extending the lease"))?;
        Ok((done.rows_affected() == 1).then(|| req.lease.duration()))
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        if let Some(sessions) = &self.sessions {
            return sessions.release(req, token).await;
        }
        if let Some(side) = Side::of(req.kind) {
            return self.flavours.release(req, side, token).await;
        }
        let freed = sqlx::query(include_str!("sql/release.sql"))
            .bind(req.name.as_str())
            .bind(req.owner.as_str())
            .bind(token.map(|t| t.get() as i64))
            .fetch_optional(&self.pool)
            .await
            .map_err(err("releasing the lock"))?;
        Ok(freed.is_some())
    }

    async fn watch_free(&self, req: &LockRequest) -> Result<Wakeups> {
        self.releases.watch(&req.name).await
    }

    fn waiter(&self, req: &LockRequest) -> Option<Box<dyn Waiter>> {
        if self.sessions.is_some() {
            return None;
        }
        let side = Side::of(req.kind)?;
        Some(Box::new(SqlFlavourWaiter::new(
            self.flavours.clone(),
            req.clone(),
            side,
        )))
    }

    async fn count_permits(&self, req: &LockRequest) -> Result<PermitCount> {
        if self.sessions.is_some() {
            return Err(self.refusal(req.kind));
        }
        let (size, taken) = self.flavours.count(&req.name).await?;
        Ok(PermitCount {
            size: size.map(|size| u32::try_from(size).unwrap_or(u32::MAX)),
            taken: u32::try_from(taken).unwrap_or(u32::MAX),
        })
    }

    async fn set_permits(&self, name: &LockName, permits: u32) -> Result<Option<u32>> {
        if self.sessions.is_some() {
            return Err(self.refusal(LockKind::Permit { permits }));
        }
        self.flavours.set_permits(name, permits).await
    }

    async fn elect_write(
        &self,
        election: &LockName,
        term: FencingToken,
        value: Option<&str>,
        ttl: Duration,
    ) -> Result<bool> {
        // A whole transaction, finished even if this call is dropped: see `crate::sqlx_support::tx`.
        let (pool, election) = (self.pool.clone(), election.clone());
        let value = value.map(str::to_owned);
        tx::finished(async move {
            sync::elect_write(&pool, &election, term, value.as_deref(), ttl).await
        })
        .await
    }

    async fn elect_current(&self, election: &LockName) -> Result<Option<ElectionEntry>> {
        sync::elect_current(&self.pool, election).await
    }

    async fn elect_log(
        &self,
        election: &LockName,
        after: Option<u64>,
    ) -> Result<Vec<ElectionEntry>> {
        sync::elect_log(&self.pool, election, after).await
    }

    async fn watch_election(&self, election: &LockName) -> Result<Wakeups> {
        self.releases
            .watch_changes(format!("e:{}", election.as_str()))
            .await
    }

    async fn latch_set(&self, latch: &LockName, count: u64) -> Result<bool> {
        sync::latch_set(&self.pool, latch, count).await
    }

    async fn latch_count_down(&self, latch: &LockName) -> Result<u64> {
        let (pool, latch) = (self.pool.clone(), latch.clone());
        tx::finished(async move { sync::latch_count_down(&pool, &latch).await }).await
    }

    async fn latch_count(&self, latch: &LockName) -> Result<u64> {
        sync::latch_count(&self.pool, latch).await
    }

    async fn watch_latch(&self, latch: &LockName) -> Result<Wakeups> {
        self.releases
            .watch_changes(format!("l:{}", latch.as_str()))
            .await
    }

    async fn status(&self, which: &Selection) -> Result<Vec<LockStatus>> {
        let (name, prefix) = sql_inspect::selection(NAME, which)?;
        let statement = if self.sessions.is_some() {
            include_str!("sql/session_status.sql")
        } else {
            include_str!("sql/status.sql")
        };
        let rows = sqlx::query(statement)
            .bind(name)
            .bind(prefix)
            .fetch_all(&self.pool)
            .await
            .map_err(err("reading the locks"))?;
        let mut found = rows
            .iter()
            .map(sql_inspect::status_row)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(err("reading the locks"))?;
        if self.sessions.is_none() {
            found.extend(self.flavours.status(name, prefix).await?);
            found.sort_by(|a, b| a.name.cmp(&b.name));
        }
        Ok(found)
    }

    async fn force_release(&self, name: &LockName, kind: LockKind) -> Result<ForcedRelease> {
        if let Some(side) = Side::of(kind) {
            if self.sessions.is_some() {
                return Err(self.refusal(kind));
            }
            return self.flavours.force_release(name, side).await;
        }
        let statement = if self.sessions.is_some() {
            include_str!("sql/session_force_release.sql")
        } else {
            include_str!("sql/force_release.sql")
        };
        let row = sqlx::query(statement)
            .bind(name.as_str())
            .fetch_one(&self.pool)
            .await
            .map_err(err("releasing the lock by force"))?;
        sql_inspect::forced_row(&row).map_err(err("releasing the lock by force"))
    }
}
