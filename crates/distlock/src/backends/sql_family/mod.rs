//! The SQL family: PostgreSQL and MySQL/MariaDB through sqlx, client–server databases whose
//! locks are rows with a lease judged by the server's clock (the default), or session locks
//! held by a connection (`?lock=session`). One backend, [`SqlBackend`], runs both over a
//! [`Dialect`]; `PostgresBackend` and `MysqlBackend` are its public faces, each a thin struct
//! around it ([`sql_store!`]).
//!
//! Written once, here:
//! * `mod.rs`: connecting (URL, probe, pool, tables, session pool), which lock mode and
//!   flavour takes which path, capabilities, status merging, forced-release dispatch, deadlock
//!   retries, and the error each step reports;
//! * `dialect.rs`: what a dialect supplies, and the statements the flow runs itself by name
//!   (tables, status, election reads) through sqlx's bounds written once ([`Runs`]);
//! * `flavours.rs`: the fair lock, read-write lock and semaphore steps (one transaction each,
//!   judged by the client's rules, `backends/client_rules/`), the semaphore count and resize;
//! * `sync.rs`: election records (lock, decide, append, tell, update) and latch transactions;
//! * `session.rs`: session locks over a store's connection (one task per holding);
//! * `url.rs`: the parameters distlock reads from the URL; `inspect.rs`: the rows of a status
//!   or a forced release, decoded.
//!
//! What stays per dialect (`postgres/`, `mysql/`), and why:
//! * **The SQL text** (`sql/*.sql`): placeholders (`$1`, reusable, against `?`, bound once per
//!   use, so each dialect binds in its own order), the clock (`now()` against
//!   `UTC_TIMESTAMP(6)`, leases in ms against µs), how an upsert reports its outcome
//!   (`RETURNING` against `LAST_INSERT_ID(expr)`, which MySQL answers in the same reply), and
//!   the column types (`text COLLATE "C"` against `VARBINARY`, so MySQL binds names as bytes).
//! * **How much one statement can do**: PostgreSQL reads and drops lapsed rows, draws a token
//!   or forces a release in one statement (data-modifying `WITH`); MySQL needs a statement per
//!   step, and makes a missing row outside the step's transaction (an insert inside it takes
//!   gap locks that deadlock two steps). The flow asks the dialect for a step and runs it the
//!   same way either way.
//! * **Error codes**: the deadlock victim's SQLSTATE (`40P01`, `40001`), MySQL's error numbers
//!   for a connection already gone and a column already added.
//! * **How waiters hear of a change**: PostgreSQL notifies (`LISTEN`/`NOTIFY` on one listening
//!   connection per client, `postgres/notify.rs`); MySQL cannot, so a poller per watched
//!   synchronizer reads it (`backends/poll_watch.rs`), and elections, latches and exclusive locks
//!   are polled by the core.
//! * **Session locks**: the lock function (`pg_try_advisory_lock` on a 64-bit hash, `GET_LOCK`
//!   on the name), how the token is drawn, how a dead connection is noticed (PostgreSQL's
//!   socket at once, MySQL's by a ping), and how a forced release ends the holder's session
//!   (`pg_terminate_backend`, `KILL`).
//! * **Migrations**: MySQL 8 has no `ADD COLUMN IF NOT EXISTS`, so older tables get their
//!   holder columns by a step of its own.

mod config;
mod dialect;
pub(crate) mod flavours;
pub(crate) mod inspect;
pub(crate) mod session;
pub(crate) mod sync;
pub(crate) mod url;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::Pool;
use sqlx::pool::PoolOptions;

pub use self::config::{SqlConfig, SslMode};
pub(crate) use self::dialect::{
    ConnectOptions, Dialect, Picked, Read, Runs, SqlResult, Statement, Wants, dialect_statements,
};
use self::flavours::{FlavourSql, Flavours};
use self::session::Sessions;
use self::sync::{Entries, SyncSql};
use self::url::LockMode;
use crate::backend::{
    Attempt, Backend, Capabilities, ElectionEntry, ElectionWrite, Elections, Inspection, Kinds,
    Latches, LockRequest, PermitCount, Semaphores, Waiter, Wakeups,
};
use crate::backends::client_rules::flavour_rules::Side;
use crate::backends::client_rules::flavour_waiter::SqlFlavourWaiter;
use crate::error::{Error, Result};
use crate::options::Options;
use crate::sqlx_support::error::from_sqlx;
use crate::sqlx_support::tx;
use crate::status::{ForcedRelease, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName};

/// How long a call waits for a free pooled connection before failing with a connection error.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// How many times a transaction the database chose as a deadlock victim is run again.
const DEADLOCK_RETRIES: u32 = 5;

/// The error of step `what` on dialect `D`.
pub(crate) fn err<D: Dialect>(what: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
    move |e| from_sqlx(D::NAME, what, e)
}

/// Runs `step` (one transaction) again while the database picks it as a deadlock victim.
pub(crate) async fn retried<D, T, F, Fut>(what: &'static str, mut step: F) -> Result<T>
where
    D: Dialect,
    F: FnMut() -> Fut,
    Fut: Future<Output = SqlResult<T>>,
{
    let mut tries = 0;
    loop {
        match step().await {
            Err(e) if is_deadlock::<D>(&e) && tries < DEADLOCK_RETRIES => tries += 1,
            done => return done.map_err(err::<D>(what)),
        }
    }
}

fn is_deadlock<D: Dialect>(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|code| code == D::DEADLOCK)
}

/// Locks in a SQL database of dialect `D`: lease rows, or session locks (`?lock=session`).
pub(crate) struct SqlBackend<D: Dialect> {
    pool: Pool<D::Db>,
    url: String,
    sessions: Option<Sessions<D::Sessions>>,
    flavours: Arc<Flavours<D>>,
    dialect: Arc<D>,
}

impl<D: FlavourSql + SyncSql> SqlBackend<D> {
    /// Connects to the database `url` names and creates distlock's tables if missing.
    pub(crate) async fn connect(url: &str, options: &Options) -> Result<Self> {
        let config = SqlConfig::from_url(url).map_err(|e| e.with_backend(D::NAME))?;
        Self::open(&config, Some(crate::url::redact(url)), options).await
    }

    /// Connects as `config` says and creates distlock's tables if missing.
    pub(crate) async fn connect_config(config: &SqlConfig, options: &Options) -> Result<Self> {
        Self::open(config, None, options).await
    }

    /// `shown`: the URL the configuration was read from, password masked, for messages.
    async fn open(config: &SqlConfig, shown: Option<String>, options: &Options) -> Result<Self> {
        let acquire_timeout = options.connect_timeout.unwrap_or(ACQUIRE_TIMEOUT);
        let cfg = url::driver_config::<ConnectOptions<D>>(config, shown, D::NAME, D::PRODUCT)?;
        url::probe(D::NAME, &cfg).await?;
        // A dialect that notifies keeps its listening connection in the pool too.
        let listening = u32::from(D::NOTIFIES);
        let pool = PoolOptions::<D::Db>::new()
            .max_connections(cfg.url.max_connections + listening)
            .acquire_timeout(acquire_timeout)
            .connect_lazy_with(cfg.options.clone());
        let sessions = match cfg.url.mode {
            LockMode::Lease => None,
            LockMode::Session => {
                let pool = PoolOptions::new()
                    .max_connections(cfg.url.max_connections)
                    .acquire_timeout(acquire_timeout);
                Some(Sessions::new(D::sessions(pool, cfg.options), options))
            }
        };
        Self::over(pool, cfg.url.redacted, sessions).await
    }

    /// Lease locks over the application's pool: distlock's statements run on its connections,
    /// under its settings; the tables are created if missing, as `connect` does.
    pub(crate) async fn from_pool(pool: Pool<D::Db>) -> Result<Self> {
        Self::over(pool, "the application's pool".to_string(), None).await
    }

    /// The backend over `pool`, its tables made (or brought up to date) first.
    async fn over(
        pool: Pool<D::Db>,
        shown: String,
        sessions: Option<Sessions<D::Sessions>>,
    ) -> Result<Self> {
        let made = [
            "creating the lock tables",
            "creating the election and latch tables",
            "creating the fair, read-write and semaphore tables",
        ];
        for (tables, what) in D::TABLES.into_iter().zip(made) {
            D::Db::run_all(&pool, tables)
                .await
                .map_err(err::<D>(what))?;
        }
        D::upgrade(&pool).await?;
        let dialect = Arc::new(D::new(&pool));
        Ok(SqlBackend {
            flavours: Arc::new(Flavours::new(pool.clone(), dialect.clone())),
            dialect,
            pool,
            url: shown,
            sessions,
        })
    }

    /// The connection pool, for the row-lock API and the caller's own queries.
    pub(crate) fn pool(&self) -> &Pool<D::Db> {
        &self.pool
    }

    /// `Debug` of the public struct `name`: the URL (password masked) and the lock mode.
    pub(crate) fn describe(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(name)
            .field("url", &self.url)
            .field("session_locks", &self.sessions.is_some())
            .finish()
    }
}

impl<D: Dialect> std::fmt::Debug for SqlBackend<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlBackend")
            .field("backend", &D::NAME)
            .field("url", &self.url)
            .field("session_locks", &self.sessions.is_some())
            .finish()
    }
}

#[async_trait]
impl<D: FlavourSql + SyncSql> Backend for SqlBackend<D> {
    fn name(&self) -> &'static str {
        D::NAME
    }

    fn capabilities(&self) -> Capabilities {
        let base = if self.sessions.is_some() {
            // Session locks are exclusive locks of a connection: no queue, no shared side, no
            // count.
            Capabilities::sessions(None, session::NO_LEASE).refusing_with(session::SESSION_KINDS)
        } else {
            Capabilities::leases().keeping(Kinds::ALL)
        };
        if D::NOTIFIES { base.notifying() } else { base }
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        if let Some(sessions) = &self.sessions {
            return sessions.try_take(req).await;
        }
        if let Some(side) = Side::of(req.kind) {
            // A one-off attempt never joins a queue (the waiter does).
            return self.flavours.take_side(req, side, false).await;
        }
        D::take(&self.pool, req)
            .await
            .map_err(err::<D>("taking the lock"))
    }

    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<Option<Duration>> {
        if let Some(sessions) = &self.sessions {
            // A session holding has no lease; the duration is not used.
            let held = sessions.still_held(req, token).await?;
            return Ok(held.then_some(Duration::ZERO));
        }
        let held = match Side::of(req.kind) {
            Some(side) => self.flavours.extend(req, side, token).await?,
            None => D::extend(&self.pool, req, token.get() as i64)
                .await
                .map_err(err::<D>("extending the lease"))?,
        };
        Ok(held.then(|| req.lease.duration()))
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        if let Some(sessions) = &self.sessions {
            return sessions.release(req, token).await;
        }
        if let Some(side) = Side::of(req.kind) {
            return self.flavours.release(req, side, token).await;
        }
        D::release(&self.pool, req, token.map(|t| t.get() as i64))
            .await
            .map_err(err::<D>("releasing the lock"))
    }

    async fn watch_free(&self, req: &LockRequest) -> Result<Wakeups> {
        self.dialect.watch_free(&req.name).await
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

    fn semaphores(&self) -> Option<&dyn Semaphores> {
        // Session locks have no semaphores (see `capabilities`).
        self.sessions.is_none().then_some(self as &dyn Semaphores)
    }

    crate::backend::offers!(elections, latches, inspection);
}

#[async_trait]
impl<D: FlavourSql + SyncSql> Semaphores for SqlBackend<D> {
    async fn count_permits(&self, req: &LockRequest) -> Result<PermitCount> {
        let (size, taken) = self.flavours.count(&req.name).await?;
        Ok(PermitCount {
            size: size.map(|size| u32::try_from(size).unwrap_or(u32::MAX)),
            taken: u32::try_from(taken).unwrap_or(u32::MAX),
        })
    }

    async fn set_permits(&self, name: &LockName, permits: u32) -> Result<Option<u32>> {
        self.flavours.set_permits(name, permits).await
    }
}

#[async_trait]
impl<D: FlavourSql + SyncSql> Elections for SqlBackend<D> {
    async fn elect_write(&self, write: ElectionWrite<'_>) -> Result<bool> {
        let value = write.value.map(str::to_owned);
        let election = write.election.clone();
        sync::elect_write::<D>(self.pool.clone(), election, write.term, value, write.ttl).await
    }

    async fn elect_current(&self, election: &LockName) -> Result<Option<ElectionEntry>> {
        let live = sync::entries::<D>(&self.pool, election.as_str(), Entries::Live)
            .await
            .map_err(err::<D>("reading the election record"))?;
        Ok(live.into_iter().last())
    }

    async fn elect_log(
        &self,
        election: &LockName,
        after: Option<u64>,
    ) -> Result<Vec<ElectionEntry>> {
        let entries = after.map_or(Entries::Latest, Entries::After);
        sync::entries::<D>(&self.pool, election.as_str(), entries)
            .await
            .map_err(err::<D>("reading the election log"))
    }

    async fn watch_election(&self, election: &LockName) -> Result<Wakeups> {
        self.dialect
            .watch_changes(sync::election_key(election))
            .await
    }
}

#[async_trait]
impl<D: FlavourSql + SyncSql> Latches for SqlBackend<D> {
    async fn latch_set(&self, latch: &LockName, count: u64) -> Result<bool> {
        sync::latch_set::<D>(self.pool.clone(), latch.clone(), count).await
    }

    async fn latch_count_down(&self, latch: &LockName) -> Result<u64> {
        sync::latch_count_down::<D>(self.pool.clone(), latch.clone()).await
    }

    async fn latch_count(&self, latch: &LockName) -> Result<u64> {
        D::latch_count(&self.pool, latch.as_str())
            .await
            .map_err(err::<D>("reading the latch"))
    }

    async fn watch_latch(&self, latch: &LockName) -> Result<Wakeups> {
        self.dialect.watch_changes(sync::latch_key(latch)).await
    }
}

#[async_trait]
impl<D: FlavourSql + SyncSql> Inspection for SqlBackend<D> {
    async fn status(&self, which: &Selection) -> Result<Vec<LockStatus>> {
        let picked = inspect::selection(D::NAME, which)?;
        let [leases, sessions] = D::STATUS;
        let statement = if self.sessions.is_some() {
            sessions
        } else {
            leases
        };
        let found = D::Db::rows(&self.pool, D::select(statement, picked)).await;
        let mut found = found
            .and_then(inspect::statuses)
            .map_err(err::<D>("reading the locks"))?;
        if self.sessions.is_none() {
            found.extend(self.flavours.status(picked).await?);
            found.sort_by(|a, b| a.name.cmp(&b.name));
        }
        Ok(found)
    }

    async fn force_release(&self, name: &LockName, kind: LockKind) -> Result<ForcedRelease> {
        let sessions = self.sessions.is_some();
        // Session locks keep the exclusive lock alone: the client refused the other kinds.
        if let Some(side) = Side::of(kind) {
            return self.flavours.force_release(name, side).await;
        }
        let (pool, name) = (self.pool.clone(), name.clone());
        tx::finished(async move {
            retried::<D, _, _, _>("releasing the lock by force", || {
                D::force_release(&pool, sessions, name.as_str())
            })
            .await
        })
        .await
    }
}

/// The public face of one SQL store, written once: the struct (a [`SqlBackend`] of the store's
/// dialect), `connect`, `connect_with` and `pool()`, its `Debug`, and `Backend` with every
/// method handed to the core (defaults included, so the struct answers exactly as the core
/// does). The store gives the struct's docs, its dialect, its pool type, and the docs of the
/// URL `connect` takes.
macro_rules! sql_store {
    (
        $(#[$doc:meta])*
        pub struct $store:ident(SqlBackend<$dialect:ty>) with pool $pool:ty;
        $(#[$url:meta])*
        fn connect;
    ) => {
        $(#[$doc])*
        pub struct $store {
            core: $crate::backends::sql_family::SqlBackend<$dialect>,
        }

        impl $store {
            /// Connects to the database `url` names and creates distlock's tables if missing.
            ///
            $(#[$url])*
            pub async fn connect(url: &str) -> $crate::Result<Self> {
                Self::connect_with(url, &$crate::Options::default()).await
            }

            /// [`connect`](Self::connect) with [`Options`](crate::Options): `connect_timeout`
            /// bounds getting a pooled connection, `response_timeout` a session lock's
            /// liveness ping.
            pub async fn connect_with(url: &str, options: &$crate::Options) -> $crate::Result<Self> {
                let core = $crate::backends::sql_family::SqlBackend::connect(url, options).await?;
                Ok($store { core })
            }

            /// Connects as `config` says (no URL: see the module's "Configuration in code")
            /// and creates distlock's tables if missing. [`Options`](crate::Options) as for
            /// [`connect_with`](Self::connect_with).
            pub async fn connect_config(
                config: $crate::backends::sql_family::SqlConfig,
                options: &$crate::Options,
            ) -> $crate::Result<Self> {
                let core =
                    $crate::backends::sql_family::SqlBackend::connect_config(&config, options)
                        .await?;
                Ok($store { core })
            }

            /// Lease locks over the application's own pool: distlock's statements run on its
            /// connections, under its pool's size, timeouts and TLS. Creates distlock's tables
            /// if missing, as [`connect`](Self::connect) does (the pool's user needs the right
            /// to create tables the first time). Then
            /// [`Client::from_backend`](crate::Client::from_backend). What distlock still
            /// opens itself: see the module's "Your own pool".
            pub async fn from_pool(pool: $pool) -> $crate::Result<Self> {
                let core = $crate::backends::sql_family::SqlBackend::from_pool(pool).await?;
                Ok($store { core })
            }

            /// The connection pool, for the row-lock API and the caller's own queries.
            pub fn pool(&self) -> &$pool {
                self.core.pool()
            }
        }

        impl std::fmt::Debug for $store {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.core.describe(stringify!($store), f)
            }
        }

        #[async_trait::async_trait]
        impl $crate::backend::Backend for $store {
            fn name(&self) -> &'static str {
                $crate::backend::Backend::name(&self.core)
            }

            fn capabilities(&self) -> $crate::backend::Capabilities {
                $crate::backend::Backend::capabilities(&self.core)
            }

            async fn try_take(
                &self,
                req: &$crate::backend::LockRequest,
            ) -> $crate::Result<$crate::backend::Attempt> {
                $crate::backend::Backend::try_take(&self.core, req).await
            }

            async fn extend(
                &self,
                req: &$crate::backend::LockRequest,
                token: $crate::FencingToken,
            ) -> $crate::Result<Option<std::time::Duration>> {
                $crate::backend::Backend::extend(&self.core, req, token).await
            }

            fn max_batch(&self) -> usize {
                $crate::backend::Backend::max_batch(&self.core)
            }

            async fn extend_many(
                &self,
                batch: &[($crate::backend::LockRequest, $crate::FencingToken)],
            ) -> Vec<$crate::Result<Option<std::time::Duration>>> {
                $crate::backend::Backend::extend_many(&self.core, batch).await
            }

            async fn release(
                &self,
                req: &$crate::backend::LockRequest,
                token: Option<$crate::FencingToken>,
            ) -> $crate::Result<bool> {
                $crate::backend::Backend::release(&self.core, req, token).await
            }

            fn waiter(
                &self,
                req: &$crate::backend::LockRequest,
            ) -> Option<Box<dyn $crate::backend::Waiter>> {
                $crate::backend::Backend::waiter(&self.core, req)
            }

            async fn watch_free(
                &self,
                req: &$crate::backend::LockRequest,
            ) -> $crate::Result<$crate::backend::Wakeups> {
                $crate::backend::Backend::watch_free(&self.core, req).await
            }

            async fn abandon(&self, req: &$crate::backend::LockRequest) -> $crate::Result<()> {
                $crate::backend::Backend::abandon(&self.core, req).await
            }

            fn semaphores(&self) -> Option<&dyn $crate::backend::Semaphores> {
                $crate::backend::Backend::semaphores(&self.core)
            }

            fn elections(&self) -> Option<&dyn $crate::backend::Elections> {
                $crate::backend::Backend::elections(&self.core)
            }

            fn latches(&self) -> Option<&dyn $crate::backend::Latches> {
                $crate::backend::Backend::latches(&self.core)
            }

            fn inspection(&self) -> Option<&dyn $crate::backend::Inspection> {
                $crate::backend::Backend::inspection(&self.core)
            }
        }
    };
}
pub(crate) use sql_store;
