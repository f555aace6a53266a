//! The etcd backend: etcd's own mutex recipe (the `concurrency.Mutex` layout that `etcdctl lock`
//! uses), held by the client's session lease and fenced by the holder key's create revision.
//!
//! * `keys`: where a lock's contenders put their keys.
//! * `session`: the client's lease and its keep-alive; its end is every holding's lost signal.
//! * `waiter`: a contender's place in the queue, and the watch on the one ahead of it.
//! * `election`: election records (fenced by compare-and-set, live while their writer's lease
//!   is) and the watch on a key; `latch`: count-down latches.
//! * `inspect`: a lock's status and its forced release.
//! * `attempts`: how one request is sent again, after a fault or beside a slow attempt.
//!
#![doc = include_str!("docs.md")]

mod attempts;
mod config;
mod election;
mod inspect;
mod keys;
mod latch;
mod session;
mod waiter;

pub use self::config::{EtcdConfig, EtcdTls};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, GetResponse, Identity,
    PutOptions, TlsOptions, Txn, TxnOp, TxnResponse, WatchOptions, WatchStream,
};

use self::attempts::{AnswerTimes, Attempts};
use self::keys::LockKeys;
use self::session::{Session, Sessions};
use self::waiter::EtcdWaiter;
use crate::backend::{
    Attempt, Backend, Capabilities, ElectionEntry, ElectionWrite, Elections, Inspection, Kinds,
    Latches, LockRequest, PermitCount, Semaphores, Waiter, Wakeups,
};
use crate::backends::queues::records::contender_of;
use crate::error::{Error, ErrorKind, Result};
use crate::options::Options;
use crate::status::{ForcedRelease, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName, OwnerToken};

pub(crate) const NAME: &str = "etcd";

/// What sets etcd's shortest lease and how to lower it, for a refusal of a shorter one.
pub(super) const MINIMUM_TTL_WHY: &str = "etcd raises a shorter TTL to 1.5 times its \
     --election-timeout, rounded up to a second; lower the servers' --election-timeout to keep \
     shorter leases";

/// How long connecting may take, unless [`Options::connect_timeout`] says otherwise.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take, unless [`Options::response_timeout`] says otherwise.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the backend and its waiters share.
pub(crate) struct Inner {
    client: Client,
    sessions: Sessions,
    config: config::Config,
    /// Numbers this client's contender keys.
    contenders: AtomicU64,
    /// Numbers whose keys this client deleted itself, named again before a new one is taken: a
    /// key name used once per take left a deleted key in the lock's range for every cycle,
    /// which each later range read of that lock walked until etcd compacted them (an
    /// uncontended worker's cycles/s fell by a fifth between a 5 s and a 20 s run). A name
    /// used again is one key in etcd's index, with a generation per take, as etcd's own mutex
    /// has (one key per session).
    free_contenders: std::sync::Mutex<Vec<u64>>,
    /// How long answers take, for when to send a request again beside an unanswered one.
    answers: AnswerTimes,
    holdings: Holdings,
    retry_for: Duration,
}

/// A lock this client holds: its key, found again by the fencing token (its create revision).
type Holding = super::queues::holdings::Holding<Session>;
type Holdings = super::queues::holdings::Holdings<Session>;

/// Locks in an etcd cluster. Built by [`crate::connect`] from `etcd://…` or `etcds://…`.
pub struct EtcdBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("url", &self.inner.config.redacted)
            .field("ttl", &self.inner.config.ttl)
            .finish()
    }
}

/// Maps a client error: transport failures and unavailable servers are
/// [`ErrorKind::Connection`], everything etcd refused is [`ErrorKind::Backend`]. etcd-client's
/// messages carry no password.
pub(crate) fn from_etcd(what: &str) -> impl FnOnce(etcd_client::Error) -> Error + '_ {
    move |e| {
        let kind = match &e {
            etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => {
                ErrorKind::Connection
            }
            etcd_client::Error::GRpcStatus(status) => match status.code() {
                tonic_code::Unavailable | tonic_code::DeadlineExceeded | tonic_code::Cancelled => {
                    ErrorKind::Connection
                }
                tonic_code::Unauthenticated | tonic_code::PermissionDenied => ErrorKind::Connection,
                // A connection reset mid-request, and etcd's own "try again" answers during an
                // election, come as Unknown with these words.
                tonic_code::Unknown if passing(status.message()) => ErrorKind::Connection,
                // "etcdserver: too many requests": the server applies behind what it committed
                // (a loaded disk) and asks clients to slow down; a retry with backoff does.
                tonic_code::ResourceExhausted if passing(status.message()) => ErrorKind::Connection,
                _ => ErrorKind::Backend,
            },
            _ => ErrorKind::Backend,
        };
        Error::new(kind, what.to_string())
            .with_backend(NAME)
            .with_source(e)
    }
}

/// gRPC's status codes.
use tonic::Code as tonic_code;

/// Whether an Unknown status is a fault of the moment (the connection, an election) that a
/// retry may not see: a reset transport, or etcd's "leader changed", "no leader", "request timed
/// out", "too many requests".
fn passing(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    [
        "transport error",
        "leader changed",
        "no leader",
        "timed out",
        "timeout",
        "too many requests",
        "not capable",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// How long a request that failed with a connection fault is tried again, unless
/// [`Options::retry_for`] says otherwise: long enough to ride out an election.
const RETRY_FOR: Duration = Duration::from_secs(5);

/// How long a release or leave that could not delete its key keeps trying in the background
/// between tries (until it succeeds or the session is over).
const CLEANUP_EVERY: Duration = Duration::from_millis(500);

impl EtcdBackend {
    /// Connects to the cluster `url` names. See the module docs for the URL.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &Options::default()).await
    }

    /// [`connect`](Self::connect) with [`Options`]: `connect_timeout` bounds connecting,
    /// `response_timeout` each request.
    pub async fn connect_with(url: &str, options: &Options) -> Result<Self> {
        Self::connect_checked(config::parse(url)?, options).await
    }

    /// Connects to the cluster `config` describes (everything a URL says, in code; see
    /// [`EtcdConfig`]), with `options` as [`connect_with`](Self::connect_with) takes them.
    pub async fn connect_config(config: EtcdConfig, options: &Options) -> Result<Self> {
        Self::connect_checked(config.check()?, options).await
    }

    /// Locks through the application's own `client` (its TLS, its authentication, its
    /// channel): `config` gives the key prefix and the session TTL; its endpoints, credentials
    /// and TLS are not used (the client has its own). `client`'s own timeouts apply to every
    /// request; distlock still grants its session lease (and one per TTL of leases shorter than
    /// it) and keeps them alive on that client, and opens its watches on it. Fails if the
    /// cluster does not answer through `client`.
    pub async fn from_client(client: Client, config: EtcdConfig) -> Result<Self> {
        let mut config = config;
        if config.endpoints.is_empty() {
            // Not used: only so the check (and errors) have something to show.
            config.endpoints = vec!["(the application's client)".into()];
        }
        let config = config.check()?;
        let options = Options::default();
        let connect_timeout = options.connect_timeout.unwrap_or(CONNECT_TIMEOUT);
        Self::start(client, config, &options, connect_timeout).await
    }

    async fn connect_checked(config: config::Config, options: &Options) -> Result<Self> {
        let connect_timeout = options.connect_timeout.unwrap_or(CONNECT_TIMEOUT);
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(connect_timeout)
            .with_timeout(options.response_timeout.unwrap_or(RESPONSE_TIMEOUT))
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5))
            // A member that has lost its leader (cut off from the others) refuses a request at
            // once with "no leader", before proposing anything, instead of holding it until
            // the request times out: the request is then tried again, on another member.
            .with_require_leader(true);
        if let Some(user) = &config.user {
            let password = config.password.clone().unwrap_or_default();
            connect = connect.with_user(user.clone(), password);
        }
        if let Some(files) = &config.tls {
            connect = connect.with_tls(tls_options(files)?);
        }
        let unreachable = |why: String| {
            Error::new(
                ErrorKind::Connection,
                format!("cannot reach etcd at {}: {why}", config.redacted),
            )
            .with_backend(NAME)
        };
        let client = tokio::time::timeout(
            connect_timeout,
            Client::connect(config.urls(), Some(connect)),
        )
        .await
        .map_err(|_| unreachable(format!("no answer within {connect_timeout:?}")))?
        .map_err(|e| unreachable(e.to_string()))?;
        Self::start(client, config, options, connect_timeout).await
    }

    /// The backend over `client`, once the cluster answered through it.
    async fn start(
        client: Client,
        config: config::Config,
        options: &Options,
        connect_timeout: Duration,
    ) -> Result<Self> {
        let unreachable = |why: String| {
            Error::new(
                ErrorKind::Connection,
                format!("cannot reach etcd at {}: {why}", config.redacted),
            )
            .with_backend(NAME)
        };
        // The connection is made lazily: ask once, so a server that is down fails here.
        tokio::time::timeout(connect_timeout, client.maintenance_client().status())
            .await
            .map_err(|_| unreachable(format!("no answer within {connect_timeout:?}")))?
            .map_err(|e| unreachable(e.to_string()))?;
        let sessions = Sessions::new(client.clone(), config.ttl);
        // So that `Capabilities` (and `Client::keepable_lease`) state the shortest lease etcd
        // keeps before a lock asks for one.
        tokio::time::timeout(connect_timeout, sessions.probe_minimum())
            .await
            .map_err(|_| unreachable(format!("no answer within {connect_timeout:?}")))??;
        Ok(EtcdBackend {
            inner: Arc::new(Inner {
                client,
                sessions,
                config,
                contenders: AtomicU64::new(0),
                free_contenders: std::sync::Mutex::new(Vec::new()),
                answers: AnswerTimes::default(),
                holdings: Holdings::default(),
                retry_for: options.retry_for.unwrap_or(RETRY_FOR),
            }),
        })
    }

    /// Ends this client's session: revokes its lease, so every lock it holds is freed at once
    /// (their guards report the loss). The next take starts a new session.
    #[doc(hidden)] // for the tests (not covered by semver)
    pub async fn end_session(&self) -> Result<()> {
        self.inner.sessions.end().await
    }
}

fn tls_options(files: &EtcdTls) -> Result<TlsOptions> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            Error::new(
                ErrorKind::InvalidUrl,
                format!("cannot read {}: {e}", path.display()),
            )
            .with_backend(NAME)
        })
    };
    let mut tls = TlsOptions::new();
    if let Some(ca) = &files.ca_cert {
        tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
    }
    if let (Some(cert), Some(key)) = (&files.cert, &files.key) {
        tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    Ok(tls)
}

/// The compares that hold when `key`'s value is a contender entry of `owner`
/// ([`records::contender_of`](super::queues::records::contender_of)): it starts with the owner
/// token and a newline. etcd compares values as bytes and has no prefix compare; the two bounds
/// make one: above `owner\n` (no entry is that alone) and below `owner` + the byte after `\n`.
fn owned_by(key: &str, owner: &str) -> [Compare; 2] {
    [
        Compare::value(key, CompareOp::Greater, format!("{owner}\n")),
        Compare::value(key, CompareOp::Less, format!("{owner}\u{b}")),
    ]
}

impl Inner {
    /// A number no other contender of this client has now: the one freed last, else a new one.
    pub(crate) fn next_contender(&self) -> u64 {
        let freed = self
            .free_contenders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop();
        freed.unwrap_or_else(|| self.contenders.fetch_add(1, Ordering::Relaxed))
    }

    /// The contender whose key is `key` is gone: its number may name another. Only for a key
    /// this client deleted itself, compared on its create revision: no attempt of that
    /// deletion can land on a later key of the same name. (A put of the old key landing late
    /// would block the lock on this session whatever the name: puts go one attempt at a time
    /// for that reason, see [`Inner::txn_alone`].)
    fn contender_left(&self, key: &str) {
        if let Some(n) = keys::contender_number(key) {
            self.free_contenders
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(n);
        }
    }

    /// Deletes `key` only if it is still the one created at `revision` (and holds `owner`'s
    /// token, when given): never a newer contender's key (etcd issue 22082).
    async fn delete_if_same(&self, key: &str, revision: i64, owner: Option<&str>) -> Result<bool> {
        let mut when = vec![Compare::create_revision(key, CompareOp::Equal, revision)];
        if let Some(owner) = owner {
            when.extend(owned_by(key, owner));
        }
        self.delete_when(key, when).await
    }

    /// Deletes `key` if it holds `owner`'s token.
    async fn delete_if_owner(&self, key: &str, owner: &str) -> Result<bool> {
        self.delete_when(key, owned_by(key, owner).into()).await
    }

    async fn delete_when(&self, key: &str, when: Vec<Compare>) -> Result<bool> {
        let txn = Txn::new().when(when).and_then([TxnOp::delete(key, None)]);
        // A hedged attempt that finds the key already deleted by the one before it must not
        // report the holding as gone before it was released (a clean-clone CI run's demo
        // reported a lock lost on a loaded etcd).
        let answer = self
            .retrying_until(
                "deleting a contender's key",
                true,
                TxnResponse::succeeded,
                |client| {
                    let txn = txn.clone();
                    async move { client.kv_client().txn(txn).await }
                },
            )
            .await?;
        Ok(answer.succeeded())
    }

    /// Deletes a contender's key (the one created at `revision`, or whatever it is when `None`,
    /// if it holds `owner`'s token). If that fails, keeps trying in the background until it
    /// succeeds or the session is over (its lease then takes the key): a key left behind on a
    /// live session would block the lock for everyone.
    async fn delete_surely(
        self: &Arc<Self>,
        key: String,
        revision: Option<i64>,
        owner: OwnerToken,
        session: Arc<Session>,
    ) -> Result<bool> {
        let once = move |inner: Arc<Inner>, key: String, owner: OwnerToken| async move {
            match revision {
                Some(r) => inner.delete_if_same(&key, r, Some(owner.as_str())).await,
                None => inner.delete_if_owner(&key, owner.as_str()).await,
            }
        };
        let first = once(self.clone(), key.clone(), owner.clone()).await;
        if revision.is_some() && matches!(first, Ok(true)) {
            self.contender_left(&key);
        }
        if first.is_err() {
            let inner = self.clone();
            tokio::spawn(async move {
                while !session.is_over() {
                    tokio::time::sleep(CLEANUP_EVERY).await;
                    match once(inner.clone(), key.clone(), owner.clone()).await {
                        Ok(_) => return,
                        Err(e) => {
                            tracing::debug!(key, error = %e, "deleting a contender's key failed; trying again")
                        }
                    }
                }
            });
        }
        first
    }

    /// Runs one request, again while it fails with a connection fault, for up to `retry_for`:
    /// etcd-client keeps sending a share of requests to a member that is down, and an election
    /// fails requests for a moment. Every request sent this way is safe to repeat (reads,
    /// conditional writes, and puts of a key named before the first try), so an attempt left
    /// unanswered for several times the usual answer time ([`attempts`]) gets another sent
    /// beside it and the first answer wins: a write that reached a member just as its leader
    /// died is never answered (etcd drops the proposal and the member waits out its own request
    /// timeout), and waiting on it alone kept a released key, and the lock, for the whole
    /// response timeout; a member cut off from this client never answers at all. Not when
    /// `hedged` is false: a request that could do harm landing late (see [`Self::txn_alone`]).
    async fn retrying<T, F, Fut>(&self, what: &'static str, hedged: bool, request: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        self.retrying_until(what, hedged, |_| true, request).await
    }

    /// [`retrying`](Self::retrying) for a conditional write whose answer is only `settled` when
    /// its compares held (see [`Attempts::run`]).
    async fn retrying_until<T, F, Fut>(
        &self,
        what: &'static str,
        hedged: bool,
        settled: impl Fn(&T) -> bool,
        mut request: F,
    ) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let attempts = Attempts {
            answers: &self.answers,
            retry_for: self.retry_for,
            hedged,
        };
        attempts
            .run(
                settled,
                |e| from_etcd(what)(e),
                || request(self.client.clone()),
            )
            .await
    }

    /// The live session, started if there is none. The lease is granted like a put of a new
    /// key, one attempt at a time: a grant landing twice leaves an unused lease behind, which
    /// ends after its TTL.
    async fn session(&self) -> Result<Arc<Session>> {
        self.sessions
            .get(|ttl| {
                self.retrying(
                    "starting a session (granting its lease)",
                    false,
                    move |client| async move { client.lease_client().grant(ttl, None).await },
                )
            })
            .await
    }

    /// The live session for a lock of `req`'s lease: the client's own, or, for a lease shorter
    /// than its TTL, the session of that lease's TTL ([`Sessions::get_for`]). Granted as
    /// [`session`](Self::session) grants.
    async fn session_for(&self, req: &LockRequest) -> Result<Arc<Session>> {
        self.sessions
            .get_for(req.lease.duration(), req.name.as_str(), |ttl| {
                self.retrying(
                    "starting a session (granting its lease)",
                    false,
                    move |client| async move { client.lease_client().grant(ttl, None).await },
                )
            })
            .await
    }

    async fn txn(&self, what: &'static str, txn: Txn) -> Result<TxnResponse> {
        self.retrying(what, true, |client| {
            let txn = txn.clone();
            async move { client.kv_client().txn(txn).await }
        })
        .await
    }

    /// [`txn`](Self::txn) with one attempt in flight at a time: for a put that creates a
    /// contender's key when it is absent. A second attempt sent beside a slow one could land
    /// after the key was deleted (released, or left by a waiter that gave up) and create it
    /// again, held by the live session, blocking the lock for as long as this client lives.
    async fn txn_alone(&self, what: &'static str, txn: Txn) -> Result<TxnResponse> {
        self.retrying(what, false, |client| {
            let txn = txn.clone();
            async move { client.kv_client().txn(txn).await }
        })
        .await
    }

    async fn get(
        &self,
        what: &'static str,
        key: &str,
        options: Option<GetOptions>,
    ) -> Result<GetResponse> {
        self.retrying(what, true, |client| {
            let (key, options) = (key.to_string(), options.clone());
            async move { client.kv_client().get(key, options).await }
        })
        .await
    }

    async fn watch(
        &self,
        what: &'static str,
        key: &[u8],
        options: WatchOptions,
    ) -> Result<WatchStream> {
        self.retrying(what, true, |client| {
            let (key, options) = (key.to_vec(), options.clone());
            async move { client.watch_client().watch(key, Some(options)).await }
        })
        .await
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::sessions(
            Some(self.inner.sessions.ttl()),
            "the TTL of the session's lease; the URL's ?ttl= sets it, in whole seconds, from \
             etcd's minimum: 2s with its default election timeout",
        )
        // A shorter lease is held under an etcd lease of its own TTL, in whole seconds.
        .keeping_short_leases(
            Duration::from_secs(1),
            self.inner.sessions.short_minimum(),
            MINIMUM_TTL_WHY,
        )
        .notifying()
        .queueing()
        // A release deletes the holder's key and etcd's queue decides who holds next; that
        // contender is woken by its watch on the deleted key. Waking a waiter of this client as
        // well only sent it to read the queue and look for the key ahead, to find itself still
        // behind: 16 workers over 4 processes, one lock, sent 4.94 transactions and 2.94 range
        // reads per hand-off with it, 4 and 2 without.
        .handing_over()
        .keeping(Kinds::ALL)
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        let mut waiter = EtcdWaiter::new(self.inner.clone(), req.clone());
        let attempt = waiter.poll().await?;
        if matches!(attempt, Attempt::Held { .. }) {
            waiter.leave().await?;
        }
        Ok(attempt)
    }

    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<Option<Duration>> {
        // A session holding has no lease of its own: this only confirms it.
        let revision = token.get() as i64;
        let Some((key, session)) = self.inner.holdings.find(&req.name, &req.owner, revision) else {
            return Ok(None);
        };
        if session.is_over() {
            return Ok(None);
        }
        let answer = self.inner.get("confirming a holding", &key, None).await?;
        let held = answer.kvs().first().is_some_and(|kv| {
            kv.create_revision() == revision && contender_of(kv.value(), req.owner.as_str())
        });
        Ok(held.then_some(Duration::ZERO))
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        let revision = token.map(|t| t.get() as i64);
        let Some((revision, key, session)) =
            self.inner.holdings.take(&req.name, &req.owner, revision)
        else {
            return Ok(false);
        };
        self.inner
            .delete_surely(key, Some(revision), req.owner.clone(), session)
            .await
    }

    fn waiter(&self, req: &LockRequest) -> Option<Box<dyn Waiter>> {
        Some(Box::new(EtcdWaiter::new(self.inner.clone(), req.clone())))
    }

    crate::backend::offers!(semaphores, elections, latches, inspection);
}

#[async_trait]
impl Semaphores for EtcdBackend {
    async fn count_permits(&self, req: &LockRequest) -> Result<PermitCount> {
        let keys = LockKeys::new(&self.inner.config.prefix, &req.name, req.kind);
        let count = etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only();
        let size_key = keys.size_key().unwrap_or_default();
        // The size and the keys counted in one read.
        let txn = Txn::new().and_then([
            TxnOp::get(size_key, None),
            TxnOp::get(keys.range(), Some(count)),
        ]);
        let answer = self
            .inner
            .txn("counting a semaphore's holders", txn)
            .await?;
        let mut ops = answer.op_responses().into_iter();
        let size = match ops.next() {
            Some(etcd_client::TxnOpResponse::Get(get)) => waiter::size_of(get.kvs().first())?,
            _ => None,
        };
        let taken = match ops.next() {
            Some(etcd_client::TxnOpResponse::Get(get)) => get.count(),
            _ => 0,
        };
        // Waiters have keys too: permits are free only when no key is beyond them.
        Ok(PermitCount {
            size,
            taken: u32::try_from(taken).unwrap_or(u32::MAX),
        })
    }

    async fn set_permits(&self, name: &LockName, permits: u32) -> Result<Option<u32>> {
        let keys = LockKeys::new(
            &self.inner.config.prefix,
            name,
            LockKind::Permit { permits },
        );
        let size_key = keys.size_key().unwrap_or_default();
        // One put, answering the value it replaced; no lease: the size outlives every session.
        // Not sent again after a connection fault: had it landed, the size it had would be
        // answered as the new one. Its put wakes every waiter's watch on the semaphore.
        let options = PutOptions::new().with_prev_key();
        let answer = self
            .inner
            .client
            .kv_client()
            .put(size_key, permits.to_string(), Some(options))
            .await
            .map_err(from_etcd("changing a semaphore's size"))?;
        waiter::size_of(answer.prev_key())
    }
}

#[async_trait]
impl Elections for EtcdBackend {
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
        election::watch(&self.inner, election).await
    }
}

#[async_trait]
impl Latches for EtcdBackend {
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
        latch::watch(&self.inner, latch).await
    }
}

#[async_trait]
impl Inspection for EtcdBackend {
    async fn status(&self, which: &Selection) -> Result<Vec<LockStatus>> {
        inspect::status(&self.inner, which).await
    }

    async fn force_release(&self, name: &LockName, kind: LockKind) -> Result<ForcedRelease> {
        inspect::force_release(&self.inner, name, kind).await
    }
}
