//! The MySQL / MariaDB backend: lease locks in a table (the default) or session locks on
//! `GET_LOCK` (`?lock=session`). The guarantees of each are below.
//!
//! Lease locks: take, extend and release are one statement each (`sql/*.sql`), judged by the
//! server's clock. MySQL has no `RETURNING` on an upsert, so the take and release statements
//! report their outcome through `LAST_INSERT_ID(expr)`, which the server sends back in the same
//! reply. Waiters poll with the core's jittered backoff (see `docs.md` for why).
//!
#![doc = include_str!("docs.md")]

mod config;
mod flavours;
mod inspect;
mod poll_watch;
mod session;
mod sync;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};

use crate::backend::{
    Attempt, Backend, Capabilities, ElectionEntry, LockRequest, PermitCount, Waiter,
};
use crate::backends::client_rules::flavour_rules::{self, Side};
use crate::backends::sql_family::session::Sessions;
use crate::backends::client_rules::flavour_waiter::SqlFlavourWaiter;
use crate::backends::sql_family::url::{self as sql_url, LockMode};
use crate::sqlx_support::error::from_sqlx;
use crate::sqlx_support::tx;
use crate::error::{Error, Result};
use crate::options::Options;
use crate::status::{ForcedRelease, Holder, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName};

const NAME: &str = "mysql";

/// How long a call waits for a free pooled connection before failing with a connection error.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The take statement's "held" answers start here; smaller answers are fencing tokens.
const HELD_BASE: u64 = 1 << 62;

/// Locks in a MySQL or MariaDB database. Built by [`crate::connect`] from `mysql://…` or
/// `mariadb://…`; `?lock=session` picks `GET_LOCK` (session) locks instead of lease rows.
pub struct MysqlBackend {
    pool: MySqlPool,
    url: String,
    sessions: Option<Sessions<session::MySqlSessions>>,
    flavours: Arc<flavours::MysqlFlavours>,
}

impl std::fmt::Debug for MysqlBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlBackend")
            .field("url", &self.url)
            .field("session_locks", &self.sessions.is_some())
            .finish()
    }
}

fn err(what: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
    move |e| from_sqlx(NAME, what, e)
}

impl MysqlBackend {
    /// Connects to the database `url` names and creates distlock's tables if missing.
    ///
    /// `url` is `mysql://user[:password]@host:port/database` (or `mariadb://…`) with the
    /// driver's parameters (`ssl-mode=REQUIRED`, `ssl-ca=…`) and distlock's:
    /// `lock=lease|session`, `max_connections=N` (pool size, default 20).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &Options::default()).await
    }

    /// [`connect`](Self::connect) with [`Options`]: `connect_timeout` bounds getting a pooled
    /// connection, `response_timeout` a session lock's liveness ping.
    pub async fn connect_with(url: &str, options: &Options) -> Result<Self> {
        let acquire_timeout = options.connect_timeout.unwrap_or(ACQUIRE_TIMEOUT);
        let cfg = config::parse(url)?;
        sql_url::probe(NAME, &cfg).await?;
        let pool = MySqlPoolOptions::new()
            .max_connections(cfg.url.max_connections)
            .acquire_timeout(acquire_timeout)
            .connect_lazy_with(cfg.options.clone());
        sqlx::raw_sql(include_str!("sql/schema.sql"))
            .execute(&pool)
            .await
            .map_err(err("creating the lock tables"))?;
        inspect::add_holder_columns(&pool).await?;
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
                session::MySqlSessions(
                    MySqlPoolOptions::new()
                        .max_connections(cfg.url.max_connections)
                        .acquire_timeout(acquire_timeout)
                        .connect_lazy_with(cfg.options),
                ),
                options,
            )),
        };
        Ok(MysqlBackend {
            flavours: Arc::new(flavours::MysqlFlavours {
                pool: pool.clone(),
                watches: Default::default(),
            }),
            pool,
            url: cfg.url.redacted,
            sessions,
        })
    }

    /// The connection pool, for the row-lock API and the caller's own queries.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }
}

#[async_trait]
impl Backend for MysqlBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        let base = if self.sessions.is_some() {
            Capabilities::sessions(None, crate::backends::sql_family::session::NO_LEASE)
        } else {
            Capabilities::leases()
        };
        base.electing_and_latching().inspecting()
    }

    fn supports(&self, kind: LockKind) -> bool {
        // GET_LOCK locks are exclusive locks of a connection: no queue, no shared side, no count.
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
        let done = sqlx::query(include_str!("sql/take.sql"))
            .bind(req.name.as_str().as_bytes())
            .bind(req.owner.as_str())
            .bind(req.lease.as_millis() * 1000)
            .bind(Holder::this_process_record())
            .execute(&self.pool)
            .await
            .map_err(err("taking the lock"))?;
        let answer = done.last_insert_id();
        Ok(if answer >= HELD_BASE {
            Attempt::Held {
                retry_after: Some(Duration::from_millis(answer - HELD_BASE)),
            }
        } else {
            Attempt::leased(FencingToken(answer), req)
        })
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
            .bind(req.lease.as_millis() * 1000)
            .bind(req.name.as_str().as_bytes())
            .bind(req.owner.as_str())
            .bind(token.get())
            .execute(&self.pool)
            .await
            .map_err(err("extending the lease"))?;
        // sqlx asks for "found rows": 1 when the row matched, even if nothing changed.
        Ok((done.rows_affected() == 1).then(|| req.lease.duration()))
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        if let Some(sessions) = &self.sessions {
            return sessions.release(req, token).await;
        }
        if let Some(side) = Side::of(req.kind) {
            return self.flavours.release(req, side, token).await;
        }
        let token = token.map(FencingToken::get);
        let done = sqlx::query(include_str!("sql/release.sql"))
            .bind(req.name.as_str().as_bytes())
            .bind(req.owner.as_str())
            .bind(token)
            .bind(token)
            .execute(&self.pool)
            .await
            .map_err(err("releasing the lock"))?;
        Ok(done.rows_affected() == 1)
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

    async fn latch_set(&self, latch: &LockName, count: u64) -> Result<bool> {
        let (pool, latch) = (self.pool.clone(), latch.clone());
        tx::finished(async move { sync::latch_set(&pool, &latch, count).await }).await
    }

    async fn latch_count_down(&self, latch: &LockName) -> Result<u64> {
        let (pool, latch) = (self.pool.clone(), latch.clone());
        tx::finished(async move { sync::latch_count_down(&pool, &latch).await }).await
    }

    async fn latch_count(&self, latch: &LockName) -> Result<u64> {
        sync::latch_count(&self.pool, latch).await
    }

    async fn status(&self, which: &Selection) -> Result<Vec<LockStatus>> {
        let mut found = inspect::status(&self.pool, self.sessions.is_some(), which).await?;
        if self.sessions.is_none() {
            let (name, prefix) = crate::backends::sql_family::inspect::selection(NAME, which)?;
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
        let (pool, sessions, name) = (self.pool.clone(), self.sessions.is_some(), name.clone());
        tx::finished(async move { inspect::force_release(&pool, sessions, &name).await }).await
    }
}
