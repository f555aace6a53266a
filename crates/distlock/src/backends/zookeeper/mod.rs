//! The ZooKeeper backend: Curator's lock recipe (ephemeral sequential nodes under the lock's
//! node, the lowest sequence holds, each waiter watches only the node before its own), held by
//! the client's session and fenced by the holder node's creation zxid.
//!
//! * `nodes`: where a lock's contenders put their nodes, and the rule for who holds.
//! * `session`: the client's session and its check; its end is every holding's lost signal.
//! * `waiter`: a contender's node in the queue, and the watch on the one before it.
//! * `election`: election records (fenced by compare-and-set, live while their writer's
//!   session is) and the watch on a node; `latch`: count-down latches.
//! * `inspect`: a lock's status and its forced release.
//! * `size`: a semaphore's size, kept in a node of its own.
//!
#![doc = include_str!("docs.md")]

mod config;
mod election;
mod inspect;
mod latch;
mod nodes;
mod session;
mod size;
mod waiter;

pub use self::config::ZooKeeperConfig;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use zookeeper_client::{Acls, Client, CreateMode, CreateOptions};

use self::session::{Session, Sessions, on_session};
use self::waiter::ZkWaiter;
use crate::backend::{
    Attempt, Backend, Capabilities, ElectionEntry, ElectionWrite, Elections, Inspection, Kinds,
    Latches, LockRequest, PermitCount, Semaphores, Waiter, Wakeups,
};
use crate::error::{Error, ErrorKind, Result};
use crate::options::Options;
use crate::status::{ForcedRelease, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName};

pub(crate) const NAME: &str = "zk";

/// What sets the ensemble's shortest session and how to lower it, for a refusal of a shorter
/// lease.
pub(super) const MINIMUM_TIMEOUT_WHY: &str = "the servers' minSessionTimeout, two ticks \
     (tickTime) unless zoo.cfg sets it; lower minSessionTimeout or tickTime to keep shorter \
     leases";

/// How long connecting may take, unless [`Options::connect_timeout`] says otherwise.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a request that failed with a connection fault is tried again, unless
/// [`Options::retry_for`] says otherwise: long enough for the client to find another server.
const RETRY_FOR: Duration = Duration::from_secs(5);
/// How long a release or leave that could not delete its node waits between tries in the
/// background (until it succeeds or the session is over).
const CLEANUP_EVERY: Duration = Duration::from_millis(500);

/// Contenders' nodes: ephemeral (they go with the session), sequential, open to every client
/// (as Curator's default ACL provider makes them).
const CONTENDER: CreateOptions<'static> =
    CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
/// Lock parents and the chroot: container nodes, which ZooKeeper deletes once their last
/// child is gone (as Curator's `creatingParentContainersIfNeeded`), so empty locks leave
/// nothing behind and a create racing the deletion just creates the parent again.
const PARENT: CreateOptions<'static> = CreateMode::Container.with_acls(Acls::anyone_all());
/// Nodes that go with the session that made them: an election's `alive` node, a session's
/// beacon (`session.rs`).
const EPHEMERAL: CreateOptions<'static> = CreateMode::Ephemeral.with_acls(Acls::anyone_all());

type Holding = super::queues::holdings::Holding<Session>;
type Holdings = super::queues::holdings::Holdings<Session>;

/// What the backend and its waiters share.
pub(crate) struct Inner {
    sessions: Sessions,
    config: Arc<config::Config>,
    holdings: Holdings,
    retry_for: Duration,
}

/// Locks in a ZooKeeper ensemble. Built by [`crate::connect`] from `zk://…`.
pub struct ZooKeeperBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ZooKeeperBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperBackend")
            .field("url", &self.inner.config.redacted)
            .field("timeout", &self.inner.config.timeout)
            .finish()
    }
}

/// Maps a client error: a lost or unreachable connection is [`ErrorKind::Connection`], an
/// ended session [`ErrorKind::LeaseLost`] (see [`session::on_session`]), anything ZooKeeper
/// refused [`ErrorKind::Backend`]. The client's messages carry no password.
pub(crate) fn from_zk(what: &str) -> impl FnOnce(zookeeper_client::Error) -> Error + '_ {
    move |e| {
        use zookeeper_client::Error as Zk;
        let kind = match &e {
            Zk::ConnectionLoss | Zk::Timeout | Zk::NoHosts | Zk::Throttled => ErrorKind::Connection,
            // The client's own faults, never ZooKeeper's answer (those are the typed variants):
            // a socket that broke under requests in flight (a server killed: the client hands
            // them the I/O error itself, not ConnectionLoss), a connection that went silent.
            // Connection faults all the same, which `Inner::retrying` tries again on another
            // server rather than report as a refusal.
            Zk::Custom(_) => ErrorKind::Connection,
            _ => ErrorKind::Backend,
        };
        Error::new(kind, what.to_string())
            .with_backend(NAME)
            .with_source(e)
    }
}

impl ZooKeeperBackend {
    /// Connects to the ensemble `url` names (one session, used by every lock of this client).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &Options::default()).await
    }

    /// [`connect`](Self::connect) with [`Options`]: `connect_timeout` bounds connecting,
    /// `retry_for` how long a request is tried again across connection faults.
    pub async fn connect_with(url: &str, options: &Options) -> Result<Self> {
        Self::connect_checked(config::parse(url)?, options).await
    }

    /// Connects to the ensemble `config` describes (everything a URL says, in code; see
    /// [`ZooKeeperConfig`]), with `options` as [`connect_with`](Self::connect_with) takes them.
    pub async fn connect_config(config: ZooKeeperConfig, options: &Options) -> Result<Self> {
        Self::connect_checked(config.check(None)?, options).await
    }

    /// Locks through sessions opened with the application's own `connector` (its TLS, SASL,
    /// authentication, read-only setting): every session distlock opens — the client's, one per
    /// timeout for leases shorter than it, and one at connect that learns the ensemble's minimum
    /// — is a clone of `connector` with its session timeout set, connected to `config`'s
    /// servers. `config` gives the servers, the chroot and the session timeout; its credentials,
    /// if any, are added with the `digest` scheme. `zookeeper_client` has no way to open another
    /// session from a `Client`, which is one session: hence a connector, not a client.
    pub async fn from_connector(
        connector: zookeeper_client::Connector,
        config: ZooKeeperConfig,
        options: &Options,
    ) -> Result<Self> {
        Self::start(config.check(None)?, options, Some(connector)).await
    }

    async fn connect_checked(config: config::Config, options: &Options) -> Result<Self> {
        Self::start(config, options, None).await
    }

    async fn start(
        config: config::Config,
        options: &Options,
        connector: Option<zookeeper_client::Connector>,
    ) -> Result<Self> {
        let config = Arc::new(config);
        let sessions = Sessions::new(
            config.clone(),
            options.connect_timeout.unwrap_or(CONNECT_TIMEOUT),
            connector,
        );
        // Connect now, so a server that is down fails here, naming it.
        sessions.get().await?;
        // So that `Capabilities` (and `Client::keepable_lease`) state the shortest lease the
        // ensemble keeps before a lock asks for one.
        sessions.probe_minimum().await?;
        Ok(ZooKeeperBackend {
            inner: Arc::new(Inner {
                sessions,
                config,
                holdings: Holdings::default(),
                retry_for: options.retry_for.unwrap_or(RETRY_FOR),
            }),
        })
    }

    /// Ends this client's session: its nodes go at once, so every lock it holds is freed
    /// (their guards report the loss). The next take starts a new session.
    #[doc(hidden)] // for the tests (not covered by semver)
    pub async fn end_session(&self) {
        self.inner.sessions.end().await;
    }
}

impl Inner {
    /// Runs one request on `session`, again while it fails with a connection fault, for up to
    /// `retry_for` (the client finds another server meanwhile). Every request sent this way is
    /// safe to repeat (reads, and deletes of a node only this contender has).
    async fn retrying<T, F, Fut>(
        &self,
        session: &Session,
        what: &'static str,
        mut request: F,
    ) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, zookeeper_client::Error>>,
    {
        let until = crate::core::deadline::instant_after(self.retry_for);
        let mut nap = Duration::from_millis(10);
        loop {
            match request(session.client()?).await {
                Ok(answer) => return Ok(answer),
                Err(e) => {
                    let error = on_session(what, e);
                    if error.kind() != ErrorKind::Connection
                        || tokio::time::Instant::now() + nap >= until
                    {
                        return Err(error);
                    }
                    tokio::time::sleep(nap).await;
                    nap = (nap * 2).min(Duration::from_millis(320));
                }
            }
        }
    }

    /// Deletes a contender's node (`path`, which only this contender ever has). `Ok(true)` if
    /// it was there. If that fails, keeps trying in the background until it succeeds or the
    /// session is over (its nodes then go with it): a node left behind on a live session would
    /// block the lock for everyone.
    async fn delete_surely(self: &Arc<Self>, path: String, session: Arc<Session>) -> Result<bool> {
        let first = self.delete(&path, &session).await;
        if first.is_err() && !session.is_over() {
            let inner = self.clone();
            tokio::spawn(async move {
                while !session.is_over() {
                    tokio::time::sleep(CLEANUP_EVERY).await;
                    match inner.delete(&path, &session).await {
                        Ok(_) => return,
                        Err(e) => {
                            tracing::debug!(path, error = %e, "deleting a contender's node failed; trying again")
                        }
                    }
                }
            });
        }
        first
    }

    async fn delete(&self, path: &str, session: &Session) -> Result<bool> {
        let deleted = self
            .retrying(session, "deleting a contender's node", |client| {
                let path = path.to_string();
                async move {
                    match client.delete(&path, None).await {
                        Ok(()) => Ok(true),
                        Err(zookeeper_client::Error::NoNode) => Ok(false),
                        Err(e) => Err(e),
                    }
                }
            })
            .await;
        match deleted {
            // Gone with the session: nothing is left to delete.
            Err(e) if e.kind() == ErrorKind::LeaseLost => Ok(false),
            other => other,
        }
    }

    /// The names of `parent`'s children (none when it does not exist).
    async fn children(&self, session: &Session, parent: &str) -> Result<Vec<String>> {
        self.retrying(session, "reading the lock's queue", |client| {
            let parent = parent.to_string();
            async move {
                match client.list_children(&parent).await {
                    Err(zookeeper_client::Error::NoNode) => Ok(Vec::new()),
                    other => other,
                }
            }
        })
        .await
    }
}

#[async_trait]
impl Backend for ZooKeeperBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::sessions(
            Some(self.inner.sessions.timeout()),
            "the session timeout the ensemble granted; the URL's ?timeout= asks for another, \
             which the servers bound by their minSessionTimeout, two ticks by default",
        )
        // A shorter lease is held under a session of its own whose timeout is the lease.
        .keeping_short_leases(
            session::SHORT_STEP,
            self.inner.sessions.short_minimum(),
            MINIMUM_TIMEOUT_WHY,
        )
        .notifying()
        .queueing()
        // A release deletes the holder's node, and the watches of the queue wake whoever that
        // lets in: the contender just behind it, the readers behind a writer, a semaphore's
        // waiters. Waking a waiter of this client as well only sent it to read the children
        // and find itself still behind (as on etcd): 16 workers over 4 processes, one lock, made
        // 7.7–8.0 requests per hand-off with it, 5.0 without (docs/benchmarks.md).
        .handing_over()
        .keeping(Kinds::ALL)
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        let mut waiter = ZkWaiter::new(self.inner.clone(), req.clone());
        let attempt = waiter.poll().await?;
        if matches!(attempt, Attempt::Held { .. }) {
            waiter.leave().await?;
        }
        Ok(attempt)
    }

    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<Option<Duration>> {
        // A session holding has no lease of its own: this only confirms it.
        let czxid = token.get() as i64;
        let Some((path, session)) = self.inner.holdings.find(&req.name, &req.owner, czxid) else {
            return Ok(None);
        };
        if session.is_over() {
            return Ok(None);
        }
        let stat = self
            .inner
            .retrying(&session, "confirming a holding", |client| {
                let path = path.clone();
                async move { client.check_stat(&path).await }
            })
            .await;
        match stat {
            Ok(stat) => Ok(stat.filter(|s| s.czxid == czxid).map(|_| Duration::ZERO)),
            Err(e) if e.kind() == ErrorKind::LeaseLost => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        let czxid = token.map(|t| t.get() as i64);
        let Some((_, path, session)) = self.inner.holdings.take(&req.name, &req.owner, czxid)
        else {
            return Ok(false);
        };
        if session.is_over() {
            return Ok(false);
        }
        self.inner.delete_surely(path, session).await
    }

    fn waiter(&self, req: &LockRequest) -> Option<Box<dyn Waiter>> {
        Some(Box::new(ZkWaiter::new(self.inner.clone(), req.clone())))
    }

    crate::backend::offers!(semaphores, elections, latches, inspection);
}

#[async_trait]
impl Semaphores for ZooKeeperBackend {
    async fn count_permits(&self, req: &LockRequest) -> Result<PermitCount> {
        let nodes = nodes::LockNodes::new(&self.inner.config.prefix, &req.name, req.kind);
        let session = self.inner.sessions.get().await?;
        let size_node = nodes.size_node().unwrap_or_default();
        let (children, size) =
            size::children_and_size(&self.inner, &session, nodes.parent(), size_node).await?;
        // Waiters have nodes too: permits are free only when no node is beyond them.
        Ok(PermitCount {
            size: size.map(|size| size.permits),
            taken: u32::try_from(children.len()).unwrap_or(u32::MAX),
        })
    }

    async fn set_permits(&self, name: &LockName, permits: u32) -> Result<Option<u32>> {
        let kind = LockKind::Permit { permits };
        let nodes = nodes::LockNodes::new(&self.inner.config.prefix, name, kind);
        let size_node = nodes.size_node().unwrap_or_default();
        size::set_permits(&self.inner, name, size_node, permits).await
    }
}

#[async_trait]
impl Elections for ZooKeeperBackend {
    async fn elect_write(&self, write: ElectionWrite<'_>) -> Result<bool> {
        election::write(
            &self.inner,
            write.election,
            write.term,
            write.value,
            write.ttl,
        )
        .await
    }

    async fn elect_current(&self, election: &LockName) -> Result<Option<ElectionEntry>> {
        election::current(&self.inner, election).await
    }

    async fn elect_log(
        &self,
        election: &LockName,
        after: Option<u64>,
    ) -> Result<Vec<ElectionEntry>> {
        election::log(&self.inner, election, after).await
    }

    async fn watch_election(&self, election: &LockName) -> Result<Wakeups> {
        let path = election::record_path(&self.inner.config.prefix, election);
        election::watch_node(self.inner.clone(), path).await
    }
}

#[async_trait]
impl Latches for ZooKeeperBackend {
    async fn latch_set(&self, latch: &LockName, count: u64) -> Result<bool> {
        latch::set(&self.inner, latch, count).await
    }

    async fn latch_count_down(&self, latch: &LockName) -> Result<u64> {
        latch::count_down(&self.inner, latch).await
    }

    async fn latch_count(&self, latch: &LockName) -> Result<u64> {
        latch::count(&self.inner, latch).await
    }

    async fn watch_latch(&self, latch: &LockName) -> Result<Wakeups> {
        latch::watch(self.inner.clone(), latch).await
    }
}

#[async_trait]
impl Inspection for ZooKeeperBackend {
    async fn status(&self, which: &Selection) -> Result<Vec<LockStatus>> {
        inspect::status(&self.inner, which).await
    }

    async fn force_release(&self, name: &LockName, kind: LockKind) -> Result<ForcedRelease> {
        inspect::force_release(&self.inner, name, kind).await
    }
}
