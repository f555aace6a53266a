//! The etcd backend: etcd's own mutex recipe (the `concurrency.Mutex` layout that `etcdctl lock`
//! uses), held by the client's session lease and fenced by the holder key's create revision.
//!
//! * [`keys`]: where a lock's contenders put their keys.
//! * [`session`]: the client's lease and its keep-alive; its end is every holding's lost signal.
//! * [`waiter`]: a contender's place in the queue, and the watch on the one ahead of it.
//!
#![doc = include_str!("docs.md")]

mod config;
mod keys;
mod session;
mod waiter;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, GetResponse, Identity,
    TlsOptions, Txn, TxnOp, TxnResponse, WatchOptions, WatchStream,
};

use self::keys::LockKeys;
use self::session::{Session, Sessions};
use self::waiter::EtcdWaiter;
use crate::backend::{Attempt, Backend, Capabilities, LockRequest, Waiter};
use crate::error::{Error, ErrorKind, Result};
use crate::options::Options;
use crate::types::{FencingToken, LockKind, OwnerToken};

pub(crate) const NAME: &str = "etcd";

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
    holdings: Holdings,
    retry_for: Duration,
}

/// A lock this client holds: its key, found again by the fencing token (its create revision).
type Holding = super::queue::Holding<Session>;
type Holdings = super::queue::Holdings<Session>;

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
        let config = config::parse(url)?;
        let connect_timeout = options.connect_timeout.unwrap_or(CONNECT_TIMEOUT);
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(connect_timeout)
            .with_timeout(options.response_timeout.unwrap_or(RESPONSE_TIMEOUT))
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5));
        if let Some((user, password)) = &config.user {
            connect = connect.with_user(user.clone(), password.clone());
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
            Client::connect(&config.endpoints, Some(connect)),
        )
        .await
        .map_err(|_| unreachable(format!("no answer within {connect_timeout:?}")))?
        .map_err(|e| unreachable(e.to_string()))?;
        // The connection is made lazily: ask once, so a server that is down fails here.
        tokio::time::timeout(connect_timeout, client.maintenance_client().status())
            .await
            .map_err(|_| unreachable(format!("no answer within {connect_timeout:?}")))?
            .map_err(|e| unreachable(e.to_string()))?;
        let sessions = Sessions::new(client.clone(), config.ttl);
        Ok(EtcdBackend {
            inner: Arc::new(Inner {
                client,
                sessions,
                config,
                contenders: AtomicU64::new(0),
                holdings: Holdings::default(),
                retry_for: options.retry_for.unwrap_or(RETRY_FOR),
            }),
        })
    }

    /// Ends this client's session: revokes its lease, so every lock it holds is freed at once
    /// (their guards report the loss). The next take starts a new session.
    pub async fn end_session(&self) -> Result<()> {
        self.inner.sessions.end().await
    }
}

fn tls_options(files: &config::Tls) -> Result<TlsOptions> {
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
    if let Some(ca) = &files.ca {
        tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
    }
    if let (Some(cert), Some(key)) = (&files.cert, &files.key) {
        tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    Ok(tls)
}

impl Inner {
    /// A number no other contender of this client has.
    pub(crate) fn next_contender(&self) -> u64 {
        self.contenders.fetch_add(1, Ordering::Relaxed)
    }

    /// Deletes `key` only if it is still the one created at `revision` (and holds `owner`'s
    /// token, when given): never a newer contender's key (etcd issue 22082).
    async fn delete_if_same(&self, key: &str, revision: i64, owner: Option<&str>) -> Result<bool> {
        let mut when = vec![Compare::create_revision(key, CompareOp::Equal, revision)];
        if let Some(owner) = owner {
            when.push(Compare::value(key, CompareOp::Equal, owner));
        }
        self.delete_when(key, when).await
    }

    /// Deletes `key` if it holds `owner`'s token.
    async fn delete_if_owner(&self, key: &str, owner: &str) -> Result<bool> {
        self.delete_when(key, vec![Compare::value(key, CompareOp::Equal, owner)])
            .await
    }

    async fn delete_when(&self, key: &str, when: Vec<Compare>) -> Result<bool> {
        let txn = Txn::new().when(when).and_then([TxnOp::delete(key, None)]);
        let answer = self.txn("deleting a contender's key", txn).await?;
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
    /// conditional writes, and puts of a key named before the first try).
    async fn retrying<T, F, Fut>(&self, what: &'static str, mut request: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let until = tokio::time::Instant::now() + self.retry_for;
        let mut nap = Duration::from_millis(10);
        loop {
            match request(self.client.clone()).await {
                Ok(answer) => return Ok(answer),
                Err(e) => {
                    let error = from_etcd(what)(e);
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

    async fn txn(&self, what: &'static str, txn: Txn) -> Result<TxnResponse> {
        self.retrying(what, |client| {
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
        self.retrying(what, |client| {
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
        self.retrying(what, |client| {
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
        Capabilities::sessions().notifying().queueing()
    }

    fn supports(&self, kind: LockKind) -> bool {
        kind.is_any_flavour()
    }

    async fn available_permits(&self, req: &LockRequest) -> Result<u32> {
        let LockKind::Permit { permits } = req.kind else {
            return Err(Error::new(ErrorKind::InvalidInput, "not a semaphore").with_backend(NAME));
        };
        let keys = LockKeys::new(&self.inner.config.prefix, &req.name, req.kind);
        let options = etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only();
        let answer = self
            .inner
            .get(
                "counting a semaphore's holders",
                keys.range(),
                Some(options),
            )
            .await?;
        // Waiters have keys too: permits are free only when no key is beyond them.
        let taken = u32::try_from(answer.count()).unwrap_or(u32::MAX);
        Ok(permits.saturating_sub(taken))
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
            kv.create_revision() == revision && kv.value() == req.owner.as_str().as_bytes()
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
}
