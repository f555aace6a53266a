//! `connect(url)` and the [`Client`] every lock hangs off.
//!
//! # URL schemes
//!
//! | scheme | backend | feature |
//! |---|---|---|
//! | `sqlite:PATH`, `sqlite://PATH` | embedded SQLite file, shared by processes on one machine | `sqlite` (default) |
//! | `redis://`, `rediss://` | one Redis server | `redis` |
//! | `redis-sentinel://h1:p1[,h2:p2…]/MASTER` | the master a set of Redis Sentinels names, followed across failovers | `redis` |
//! | `redis-cluster://h1:p1[,h2:p2…]` | a Redis Cluster: each lock on its slot's master, waiting by sharded pub/sub | `redis` |
//! | `redlock://h1:p1,h2:p2,h3:p3[,…]` | Redlock: 3, 5 or 7 independent Redis masters, a majority holds | `redlock` |
//! | `postgres://`, `postgresql://` | PostgreSQL | `postgres` |
//! | `mysql://`, `mariadb://` | MySQL / MariaDB | `mysql` |
//! | `etcd://`, `etcds://` | an etcd cluster (etcd's own mutex layout, `etcdctl lock` compatible) | `etcd` |
//! | `memcached://h[:p][,h[:p]…]` | memcached; each lock on one server, chosen by its name | `memcached` |
//! | `s3://BUCKET[/PREFIX]`, `az://CONTAINER[/PREFIX]` | object storage: Amazon S3 and S3-compatibles (`?endpoint=`), Azure Blob Storage; leases judged by waiters' clocks, no lock server | `object-store` |
//! | `memory:`, `memory://NAME` | this process's memory, for an application's unit tests (not a distributed lock): `memory:` a store of its own, `memory://NAME` the store every client of the process naming it shares | `memory` |
//!
//! The SQL schemes take a lease lock (a row with an expiry, renewed by the watchdog) by default;
//! `?lock=session` takes session locks instead (`pg_advisory_lock` / `GET_LOCK` on a dedicated
//! connection, freed by the server when the connection ends), e.g.
//! `postgres://app@db:5432/app?lock=session`. `?max_connections=N` sizes the pool (default 20);
//! the drivers' own parameters (`sslmode=require`, `ssl-mode=REQUIRED`, …) pass through.
//!
//! A password may be written as it is, `@`, `:`, `/`, `?` and `#` included
//! (`redis://:p@ss/w0rd@cache:6379`): the user-info runs to the URL's last `@`, for every scheme
//! alike, and the drivers get it %-encoded. An `@` in a path or a query value is therefore
//! written `%40`.
//!
//! The scheme of a backend this build lacks answers [`ErrorKind::Unsupported`]. Any other
//! unknown scheme is [`ErrorKind::InvalidUrl`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::backend::{Backend, Elections, Inspection, Latches, Semaphores};
use crate::core::Engine;
use crate::election::Election;
use crate::error::{Error, ErrorKind, Result};
use crate::latch::Latch;
use crate::lock::{Lock, MultiLock};
use crate::options::Options;
use crate::status::{ForcedRelease, LockStatus, Selection};
use crate::types::{LockKind, LockName};
use crate::url::Scheme;

/// The URL used when none is given: an SQLite file in the working directory.
pub const DEFAULT_URL: &str = "sqlite:distlock.db";

/// Connects to the store `url` names. See the [module docs](self) for the schemes.
///
/// Errors: [`ErrorKind::InvalidUrl`] for a malformed URL or unknown scheme,
/// [`ErrorKind::Unsupported`] for a scheme this build lacks, [`ErrorKind::Connection`] when the
/// store cannot be reached. Messages never include the URL's password.
pub async fn connect(url: &str) -> Result<Client> {
    connect_with(url, &Options::default()).await
}

/// [`connect`] with timeouts other than the backend's defaults.
pub async fn connect_with(url: &str, options: &Options) -> Result<Client> {
    let url = url.trim();
    let scheme = Scheme::of(url)?;
    // The URL as every message shows it: without its password.
    let span = tracing::debug_span!(
        "distlock.connect",
        backend = scheme.backend(),
        url = %crate::url::redact(url),
    );
    open(url, scheme, options).instrument(span).await
}

/// The client of `url`, whose scheme is `scheme`.
async fn open(url: &str, scheme: Scheme, options: &Options) -> Result<Client> {
    let backend = backend_of(url, scheme, options).await?;
    let exit_wait = options
        .response_timeout
        .unwrap_or(crate::core::DEFAULT_EXIT_WAIT);
    // The release thread's handle on the same store (see `Engine::release_dropped`): the
    // memory store has no connections, so its own handle works on any runtime.
    let reopen: crate::core::Reopen = if scheme == Scheme::Memory {
        let same = backend.clone();
        Arc::new(move || {
            let same = same.clone();
            Box::pin(async move { Ok(same) })
        })
    } else {
        let (url, options) = (url.to_string(), options.clone());
        Arc::new(move || {
            let (url, options) = (url.clone(), options.clone());
            Box::pin(async move { backend_of(&url, scheme, &options).await })
        })
    };
    let client = Client::with_engine(backend, exit_wait, Some(reopen));
    client.engine.open_twin_early();
    Ok(client)
}

/// The backend of `url`, whose scheme is `scheme`.
// A build without any backend never reads `url`: every scheme is refused; the memory store
// alone reads no options.
#[cfg_attr(
    not(any(
        feature = "sqlite",
        feature = "redis",
        feature = "postgres",
        feature = "mysql",
        feature = "etcd",
        feature = "zookeeper",
        feature = "memcached",
        feature = "object-store"
    )),
    allow(unused_variables)
)]
async fn backend_of(url: &str, scheme: Scheme, options: &Options) -> Result<Arc<dyn Backend>> {
    match scheme {
        #[cfg(feature = "sqlite")]
        Scheme::Sqlite => Ok(Arc::new(
            crate::backends::sqlite::SqliteBackend::connect_with(url, options).await?,
        )),
        #[cfg(feature = "redis")]
        Scheme::Redis => Ok(Arc::new(
            crate::backends::redis::RedisBackend::connect_with(url, options).await?,
        )),
        #[cfg(feature = "redlock")]
        Scheme::Redlock => Ok(Arc::new(
            crate::backends::redlock::RedlockBackend::connect_with(url, options).await?,
        )),
        #[cfg(feature = "postgres")]
        Scheme::Postgres => Ok(Arc::new(
            crate::backends::postgres::PostgresBackend::connect_with(url, options).await?,
        )),
        #[cfg(feature = "mysql")]
        Scheme::Mysql => Ok(Arc::new(
            crate::backends::mysql::MysqlBackend::connect_with(url, options).await?,
        )),
        #[cfg(feature = "etcd")]
        Scheme::Etcd => Ok(Arc::new(
            crate::backends::etcd::EtcdBackend::connect_with(url, options).await?,
        )),
        #[cfg(feature = "zookeeper")]
        Scheme::ZooKeeper => Ok(Arc::new(
            crate::backends::zookeeper::ZooKeeperBackend::connect_with(url, options).await?,
        )),
        #[cfg(feature = "memcached")]
        Scheme::Memcached => Ok(Arc::new(
            crate::backends::memcached::MemcachedBackend::connect_with(url, options).await?,
        )),
        #[cfg(feature = "object-store")]
        Scheme::ObjectStore => Ok(Arc::new(
            crate::backends::objectstore::ObjectStoreBackend::connect_with(url, options).await?,
        )),
        #[cfg(feature = "memory")]
        Scheme::Memory => Ok(Arc::new(crate::backends::memory::MemoryBackend::connect(
            url,
        )?)),
        // With every backend built in, this arm matches nothing.
        #[allow(unreachable_patterns)]
        other => Err(not_built(other)),
    }
}

/// The error for a URL whose store this build lacks: it names the cargo feature to enable.
fn not_built(scheme: Scheme) -> Error {
    let feature = scheme.feature();
    let why = match scheme {
        Scheme::Memory => "; it is for an application's unit tests, e.g. in [dev-dependencies]",
        Scheme::Etcd => {
            "; building etcd's gRPC client needs protoc and protobuf's well-known types, e.g. \
             Debian's protobuf-compiler and libprotobuf-dev"
        }
        _ => "",
    };
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "the {}: backend is not part of this build of distlock: enable its cargo feature, \
             `distlock = {{ version = \"0.1\", features = [\"{feature}\"] }}`{why}",
            scheme.backend()
        ),
    )
}

/// A connection to one store, cheap to clone; every lock, read-write lock and semaphore is made
/// from it. Clones share connections, the watchdogs and the in-process wake-ups.
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> distlock::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # std::env::set_current_dir(dir.path()).unwrap(); // ./locks.db: in a temporary directory
/// let client = distlock::connect("sqlite:./locks.db").await?;
/// let guard = client.lock("report:daily").acquire().await?;
/// // … the work only one instance may do …
/// guard.release().await?;
/// client.shutdown().await; // before exiting: lets background releases finish
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) engine: Arc<Engine>,
    /// Shared by the clones: when the last one goes, background releases are waited for.
    _last: Arc<LastClient>,
}

/// Dropped with the last clone of a [`Client`] (the handles the application holds, and the
/// locks, read-write locks, elections and latches made from them).
struct LastClient(Arc<Engine>);

impl Drop for LastClient {
    fn drop(&mut self) {
        self.0.last_client_dropped();
    }
}

impl Client {
    /// A client over a store opened by its own constructor instead of a URL: from a typed
    /// configuration (`PostgresBackend::connect_config`, `RedisBackend::connect_config`, …) or
    /// over the application's own connections (`PostgresBackend::from_pool`,
    /// `RedisBackend::from_client`, `EtcdBackend::from_client`, …; each store's page under
    /// [`backends`](crate::backends) says which). The same client [`connect`] gives, with one
    /// difference: a guard dropped on a current-thread runtime that then stops is released only
    /// if the runtime runs its release; [`Client::shutdown`] before returning makes sure.
    #[cfg_attr(
        feature = "postgres",
        doc = r#"
```no_run
# async fn demo(pool: sqlx::PgPool) -> distlock::Result<()> {
use distlock::backends::postgres::PostgresBackend;
// The application's own pool: its size, timeouts, TLS and credentials apply.
let client = distlock::Client::new(PostgresBackend::from_pool(pool).await?);
let guard = client.lock("invoice:7").acquire().await?;
# Ok(()) }
```"#
    )]
    pub fn new<B: Backend + 'static>(store: B) -> Self {
        Self::from_backend(Arc::new(store))
    }

    /// A client over a backend built by hand (tests, custom stores). Not covered by semver
    /// (see the crate's Stability section).
    #[doc(hidden)]
    pub fn from_backend(backend: Arc<dyn Backend>) -> Self {
        Client::with_engine(backend, crate::core::DEFAULT_EXIT_WAIT, None)
    }

    fn with_engine(
        backend: Arc<dyn Backend>,
        exit_wait: std::time::Duration,
        reopen: Option<crate::core::Reopen>,
    ) -> Self {
        // Described to the recorder installed now, for exporters that show help and units.
        crate::metrics::describe();
        let engine = Arc::new(Engine::new(backend, exit_wait, reopen));
        Client {
            _last: Arc::new(LastClient(engine.clone())),
            engine,
        }
    }

    /// Waits until the work this client queued in the background has finished: the releases of
    /// guards that were dropped instead of released, and the clean-up of acquisitions that were
    /// cancelled or timed out (a take that landed after its caller gave up is released, a place
    /// in a wait queue is left). Call it before the program exits: a runtime that stops first
    /// drops that work, and the locks stay taken until their leases end. Guards still alive keep
    /// their locks.
    pub async fn shutdown(self) {
        self.flush().await;
    }

    /// Waits for the background work queued so far (see [`shutdown`](Client::shutdown)) while
    /// keeping the client.
    pub async fn flush(&self) {
        let span = tracing::debug_span!("distlock.flush", backend = self.backend_name());
        self.engine.flush().instrument(span).await;
    }

    /// The backend's short name: `"sqlite"`, `"redis"`, …
    pub fn backend_name(&self) -> &'static str {
        self.engine.backend.name()
    }

    /// The store's atomic steps themselves, below locks and guards: for the conformance suite
    /// (which checks each backend's contract directly) and for wrapping a backend. Calls made
    /// here bypass this client's guards, watchdogs and re-entry counts. Not covered by semver
    /// (see the crate's Stability section).
    #[doc(hidden)]
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.engine.backend
    }

    /// An exclusive, reentrant lock named `name`. Nothing is sent to the store until it is
    /// acquired; an invalid name is reported then, as [`ErrorKind::InvalidName`].
    pub fn lock(&self, name: impl AsRef<str>) -> Lock {
        Lock::new(self.clone(), name.as_ref(), LockKind::Mutex)
    }

    /// A lock that serves waiters first come, first served.
    pub fn fair_lock(&self, name: impl AsRef<str>) -> Lock {
        Lock::new(self.clone(), name.as_ref(), LockKind::Fair)
    }

    /// A read-write lock: many readers or one writer.
    pub fn rw_lock(&self, name: impl AsRef<str>) -> RwLock {
        RwLock {
            client: self.clone(),
            name: name.as_ref().to_string(),
        }
    }

    /// A semaphore with `permits` permits; each acquired permit is a guard with its own lease.
    ///
    /// # The size belongs to the semaphore
    ///
    /// The store keeps a semaphore's size with it: the count its first caller gave, changed
    /// only by [`set_semaphore_permits`](Client::set_semaphore_permits). A caller asking
    /// another count (a typo in one service's configuration) is refused at every take and
    /// count with [`ErrorKind::InvalidInput`], naming both sizes, and never gets a permit. The
    /// size stays while the semaphore is empty, so the refusal does not depend on timing, and
    /// it is checked in the same atomic step as the take (one script, transaction or multi in
    /// the store). A waiter is checked at its first attempt; after that it goes by the kept
    /// size, so a resize while it waits lets it in (or keeps it waiting) rather than failing
    /// it. Each store's guarantees page says where the size lives and what forgets it.
    ///
    /// ```no_run
    /// # async fn demo(client: distlock::Client) -> distlock::Result<()> {
    /// // Not run by the doctests: it needs a store with semaphores (Redis, etcd, ZooKeeper, …).
    /// let permit = client.semaphore("pool", 4).acquire().await?;
    /// // Another service asking 5 of "pool" now gets ErrorKind::InvalidInput:
    /// // "semaphore \"pool\" has 4 permits, and this caller asks for 5: …"
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl AsRef<str>, permits: u32) -> Lock {
        Lock::new(self.clone(), name.as_ref(), LockKind::Permit { permits })
    }

    /// Whether this client's store implements the flavour `kind` (the exclusive lock, the fair
    /// lock, each side of the read-write lock, the semaphore): a lock of a flavour it lacks
    /// answers [`ErrorKind::Unsupported`] at its first acquisition, so a program can choose
    /// another flavour (or refuse the URL) up front instead. The table of docs/guarantees.md
    /// says the same per store.
    ///
    /// ```no_run
    /// # async fn demo(client: distlock::Client) -> distlock::Result<()> {
    /// use distlock::LockKind;
    /// let lock = if client.supports(LockKind::Fair) {
    ///     client.fair_lock("queue")
    /// } else {
    ///     client.lock("queue")
    /// };
    /// # Ok(()) }
    /// ```
    pub fn supports(&self, kind: LockKind) -> bool {
        self.engine.backend.capabilities().kinds.contains(kind)
    }

    /// Changes the size of the semaphore `name` to `permits`, for every caller: see
    /// [`semaphore`](Client::semaphore). Holders keep their permits: after a shrink, new takes
    /// wait until fewer than `permits` are held; after a growth, waiters get the new permits at
    /// once. Callers that still ask the old size are refused from then on
    /// ([`ErrorKind::InvalidInput`], naming both sizes). Answers the size the semaphore had
    /// (`None` if it had none: it was never used).
    ///
    /// [`ErrorKind::InvalidInput`] for `permits` 0, [`ErrorKind::Unsupported`] on a backend
    /// without semaphores.
    ///
    /// ```no_run
    /// # async fn demo(client: distlock::Client) -> distlock::Result<()> {
    /// // Not run by the doctests: it needs a store with semaphores (Redis, etcd, ZooKeeper, …).
    /// let had = client.set_semaphore_permits("pool", 8).await?;
    /// let permit = client.semaphore("pool", 8).acquire().await?; // every caller asks 8 now
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel Safety
    ///
    /// If the future is dropped before the store answers, the size may or may not have changed.
    pub async fn set_semaphore_permits(&self, name: &str, permits: u32) -> Result<Option<u32>> {
        let name = LockName::new(name)?;
        if permits == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "a semaphore needs at least one permit",
            ));
        }
        let backend = self.engine.backend.as_ref();
        let kind = LockKind::Permit { permits };
        backend.capabilities().admit(backend.name(), kind)?;
        let span = tracing::debug_span!(
            "distlock.set_permits",
            backend = self.backend_name(),
            lock = %name,
            permits,
        );
        semaphores(backend, "resizing semaphores")?
            .set_permits(&name, permits)
            .instrument(span)
            .await
    }

    /// A leader election named `name` (see [`Election`]): campaign, observe, read the leader.
    /// On a backend without elections its calls answer [`ErrorKind::Unsupported`].
    pub fn election(&self, name: impl AsRef<str>) -> Election {
        Election::new(self.clone(), name.as_ref())
    }

    /// A count-down latch named `name` (see [`Latch`]), its count kept in the store. On a
    /// backend without latches its calls answer [`ErrorKind::Unsupported`].
    pub fn latch(&self, name: impl AsRef<str>) -> Latch {
        Latch::new(self.clone(), name.as_ref())
    }

    /// The lease closest to `wanted` that this store keeps, for a lock that should hold at
    /// least that long: rounded up to the store's lease step (whole seconds on memcached); on
    /// ZooKeeper and etcd at least the server's minimum session (2 s by default: a lease shorter
    /// than the client's session is held under one of its own, and [`Lock::lease`] refuses one
    /// below that minimum). `None` for SQL session locks
    /// (`?lock=session`), which end with their connection and refuse every lease: leave the
    /// default.
    ///
    /// ```
    /// # async fn demo(client: distlock::Client) -> distlock::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.lock("report");
    /// let lock = match client.keepable_lease(Duration::from_secs(2)) {
    ///     Some(lease) => lock.lease(lease),
    ///     None => lock,
    /// };
    /// # drop(lock); Ok(()) }
    /// ```
    pub fn keepable_lease(&self, wanted: Duration) -> Option<Duration> {
        crate::core::lease::keepable(&self.engine.backend.capabilities(), wanted)
    }

    /// What the store says of the locks named exactly `name` (one entry per flavour held or
    /// waited for; empty if none is): holdings with their fencing tokens, who took them and
    /// when, lease left, waiters where the store keeps them. See [`crate::status`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> distlock::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let client = distlock::connect(&format!("sqlite:{}", dir.path().join("locks.db").display())).await?;
    /// for lock in client.status("order:42").await? {
    ///     for h in &lock.holdings {
    ///         let who = h.holder.as_ref().map(|w| format!("pid {} on {}", w.pid, w.host));
    ///         println!("{} held with token {} by {:?}", lock.name, h.token, who);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn status(&self, name: &str) -> Result<Vec<LockStatus>> {
        let which = Selection::Name(LockName::new(name)?);
        let span = tracing::debug_span!(
            "distlock.status",
            backend = self.backend_name(),
            lock = name
        );
        let backend = self.engine.backend.as_ref();
        inspection(backend, "lock status")?
            .status(&which)
            .instrument(span)
            .await
    }

    /// [`status`](Client::status) of every lock whose name starts with `prefix` (`""`: all).
    pub async fn status_prefix(&self, prefix: &str) -> Result<Vec<LockStatus>> {
        let which = Selection::Prefix(prefix.to_string());
        let span = tracing::debug_span!("distlock.status", backend = self.backend_name(), prefix);
        let backend = self.engine.backend.as_ref();
        inspection(backend, "lock status")?
            .status(&which)
            .instrument(span)
            .await
    }

    /// What the store's own configuration puts at risk, asked of the store now: one sentence
    /// each for an operator, naming the server (never a password) and what to change. Empty
    /// when nothing is known to be wrong, or the store cannot be asked. On Redis (every scheme,
    /// Redlock's masters too): a server with `maxmemory` and an evicting `maxmemory-policy`,
    /// which may evict lock keys (each is also logged once, at `warn`, when first found);
    /// `distlock status` prints these.
    pub async fn warnings(&self) -> Vec<String> {
        let span = tracing::debug_span!("distlock.warnings", backend = self.backend_name());
        match self.engine.backend.inspection() {
            Some(inspection) => inspection.warnings().instrument(span).await,
            None => Vec::new(),
        }
    }

    /// Removes the lock `name` of flavour `kind` whoever holds it (every reader or permit of a
    /// read lock or semaphore), advancing its fencing token in the same step: the old holder's
    /// next renewal finds the holding gone and its [`Guard::lost`](crate::Guard::lost) fires,
    /// and once a newer holder has written to a fenced resource the old holder's writes are
    /// refused. For wedged holders; a healthy holder loses its lock mid-work.
    pub async fn force_release(&self, name: &str, kind: LockKind) -> Result<ForcedRelease> {
        let name = LockName::new(name)?;
        let backend = self.engine.backend.as_ref();
        backend.capabilities().admit(backend.name(), kind)?;
        // `token`: the fence the lock's counter was advanced to.
        let span = tracing::debug_span!(
            "distlock.force_release",
            backend = self.backend_name(),
            lock = %name,
            kind = %kind.short_name(),
            token = tracing::field::Empty,
        );
        let forced = inspection(backend, "forced release")?
            .force_release(&name, kind)
            .instrument(span.clone())
            .await?;
        span.record("token", forced.fence.get());
        Ok(forced)
    }

    /// All of `names` or none, taken in a fixed order so that callers naming the same locks in
    /// different orders cannot deadlock.
    pub fn multi_lock<I, S>(&self, names: I) -> MultiLock
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        MultiLock::new(
            self.clone(),
            names.into_iter().map(|n| n.as_ref().to_string()).collect(),
        )
    }
}

// What a store may offer beyond the lock, each reached by its `Backend` accessor: a store that
// lacks one answers `None`, and these turn that into the one error every caller sees,
// `ErrorKind::Unsupported` saying what the store lacks (`what`, e.g. "leader election").

/// The store's semaphore sizing, or the error saying it lacks `what`.
pub(crate) fn semaphores<'a>(backend: &'a dyn Backend, what: &str) -> Result<&'a dyn Semaphores> {
    backend.semaphores().ok_or_else(|| lacks(backend, what))
}

/// The store's election records, or the error saying it lacks leader election.
pub(crate) fn elections(backend: &dyn Backend) -> Result<&dyn Elections> {
    backend
        .elections()
        .ok_or_else(|| lacks(backend, "leader election"))
}

/// The store's count-down latches, or the error saying it lacks them.
pub(crate) fn latches(backend: &dyn Backend) -> Result<&dyn Latches> {
    backend
        .latches()
        .ok_or_else(|| lacks(backend, "count-down latches"))
}

/// The store's inspection, or the error saying it lacks `what` (status, forced release).
fn inspection<'a>(backend: &'a dyn Backend, what: &str) -> Result<&'a dyn Inspection> {
    backend.inspection().ok_or_else(|| lacks(backend, what))
}

fn lacks(backend: &dyn Backend, what: &str) -> Error {
    Error::unsupported(backend.name(), what)
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("backend", &self.engine.backend)
            .finish()
    }
}

/// Both sides of a read-write lock.
#[derive(Clone, Debug)]
pub struct RwLock {
    client: Client,
    name: String,
}

impl RwLock {
    /// The shared side: any number of readers at once, none while a writer holds the lock.
    pub fn read(&self) -> Lock {
        Lock::new(self.client.clone(), &self.name, LockKind::Read)
    }

    /// The exclusive side.
    pub fn write(&self) -> Lock {
        Lock::new(self.client.clone(), &self.name, LockKind::Write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_this_build_lacks_names_its_feature() {
        for (url, feature) in [
            ("sqlite:x.db", "sqlite"),
            ("redis://h", "redis"),
            ("redis-cluster://h:1", "redis"),
            ("redlock://h:1", "redlock"),
            ("postgres://h/db", "postgres"),
            ("mariadb://h/db", "mysql"),
            ("zk://h:2181", "zookeeper"),
            ("etcd://h:2379", "etcd"),
            ("memcached://h:11211", "memcached"),
            ("memory:", "memory"),
        ] {
            let e = not_built(Scheme::of(url).unwrap());
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{url}");
            let wanted = format!("features = [\"{feature}\"]");
            assert!(e.to_string().contains(&wanted), "{url}: {e}");
        }
    }

    #[tokio::test]
    async fn bad_urls_are_typed_errors() {
        let err = connect("nonsense").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidUrl);
        let err = connect("ftp://u:hunter2@h").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidUrl);
        assert!(!err.to_string().contains("hunter2"), "{err}");
        // One master is too few for Redlock; a build without it says it lacks it.
        let err = connect("redlock://127.0.0.1:6379").await.unwrap_err();
        let expected = if cfg!(feature = "redlock") {
            ErrorKind::InvalidUrl
        } else {
            ErrorKind::Unsupported
        };
        assert_eq!(err.kind(), expected, "{err}");
    }
}
