//! The Redis backend: every synchronizer as a few Lua scripts, waiting by pub/sub.
//! Its guarantees are below.
//!
//! * `invoke`: the server — one command connection (`pipelined`: requests of concurrent tasks
//!   share writes) and one pub/sub connection (`subscriber`) per client, scripts run by SHA-1
//!   (`EVALSHA`) and loaded again after `NOSCRIPT` (a restarted server).
//! * `keys`: where each lock lives; all keys of one lock share the hash tag `{name}`, so each
//!   script touches one cluster slot.
//! * `scripts`: the scripts of each flavour (the Lua lives in `scripts/`).
//! * `fair`: the fair lock's waiter, which holds a place in the lock's queue.
//! * `election`, `latch`: election records and count-down latches (their own scripts).
//! * `inspect`: lock status and forced release.
//! * `sentinel`: `redis-sentinel://`, where the master is and following it across a failover
//!   (the rest is this backend, unchanged).
//! * `replicas`: `?wait_replicas=N`, takes and renewals that count only once N replicas
//!   acknowledged them (`WAIT`).
//! * `cluster`: `redis-cluster://`, scripts routed to their slot's master, sharded pub/sub.
//! * `eviction`: whether the server may evict lock keys (`maxmemory-policy`), warned about at
//!   connect and in `Inspection::warnings`.
//!
#![doc = include_str!("docs.md")]

mod cluster;
pub(crate) mod config;
mod election;
mod eviction;
mod fair;
mod flavours;
mod latch;
// The single-master pieces Redlock runs on each of its masters.
pub(crate) mod inspect;
pub(crate) mod invoke;
pub(crate) mod keys;
mod pipelined;
pub(crate) mod replicas;
pub(crate) mod scripts;
mod sentinel;
pub(crate) mod subscriber;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{
    Attempt, Backend, Capabilities, ElectionEntry, ElectionWrite, Elections, Inspection, Kinds,
    Latches, LockRequest, PermitCount, Semaphores, Waiter, Wakeups, permits_differ,
    upgrade_refused,
};
use crate::error::{Error, ErrorKind, Result};
use crate::options::Options;
use crate::status::{ForcedRelease, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName};

/// The redis-rs distlock is built with (1.x): the application's `redis::Client`,
/// `ConnectionManager` and `ClusterClient` passed to the `from_…` constructors must come from
/// this same major version.
pub use ::redis as redis_rs;
pub use config::{RedisConfig, RedisLockSettings, RedisTopology};

use flavours::{Answer, Flavour, Release};
use invoke::Server;
use keys::Keys;
use scripts::SCRIPTS;

const NAME: &str = "redis";

/// How long a fair-lock or waiting-writer entry survives without its waiter asking again: the
/// longest a crashed waiter can hold up the ones behind it.
const WAITER_TTL: Duration = Duration::from_secs(6);
// Defaults of `Options`.
/// How long one command may take before the call fails (the watchdog retries within the lease).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// While the server is unreachable (restarting), requests that surely were not sent are retried
/// this long before the error reaches the caller.
const NOT_SENT_RETRY_FOR: Duration = Duration::from_secs(5);
/// The most renewals one call carries (`extend_many.lua`), as Redisson's watchdog: a script
/// runs alone on the server, so a batch must stay short (100 renewals take ~0.1 ms).
const MAX_BATCH: usize = 100;

/// Locks in one Redis server. Built by [`crate::connect`] from `redis://` or `rediss://`, or
/// from `redis-sentinel://` for the master a set of Sentinels names (followed across failovers),
/// or from `redis-cluster://` for a Redis Cluster (each lock on its slot's master).
pub struct RedisBackend {
    server: Arc<Server>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("url", &self.server.shown_url)
            .finish()
    }
}

impl RedisBackend {
    /// Connects to the server `url` names. The pub/sub connection opens at the first wait.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &Options::default()).await
    }

    /// [`connect`](Self::connect) with [`Options`] (each unset field keeps the default above).
    pub async fn connect_with(url: &str, options: &Options) -> Result<Self> {
        Self::connect_config(RedisConfig::from_url(url)?, options).await
    }

    /// Connects to the store `config` describes (one server, behind Sentinel, or a cluster),
    /// as [`connect_with`](Self::connect_with) does for a URL.
    pub async fn connect_config(config: RedisConfig, options: &Options) -> Result<Self> {
        Ok(RedisBackend {
            server: Arc::new(Server::connect_config(config, options).await?),
        })
    }

    /// Locks through the application's own `redis::Client`: its address, TLS, login, database
    /// and protocol apply. distlock opens from it one `ConnectionManager` (with `options`'
    /// timeouts) for its commands and, at the first wait, one pub/sub connection.
    pub async fn from_client(
        client: ::redis::Client,
        settings: RedisLockSettings,
        options: &Options,
    ) -> Result<Self> {
        Ok(RedisBackend {
            server: Arc::new(Server::from_client(client, &settings, options).await?),
        })
    }

    /// Locks through the application's `ConnectionManager`, shared with it (its reconnection,
    /// timeouts and login apply). A manager cannot open other connections, so give the
    /// `redis::Client` it was made from as `pubsub` for waiters woken by pub/sub (and for
    /// `wait_replicas`, which is refused without it); with `None`, waiters ask again every
    /// 100 ms.
    pub fn from_connection_manager(
        manager: ::redis::aio::ConnectionManager,
        pubsub: Option<::redis::Client>,
        settings: RedisLockSettings,
        options: &Options,
    ) -> Result<Self> {
        Ok(RedisBackend {
            server: Arc::new(Server::from_connection_manager(
                manager, pubsub, &settings, options,
            )?),
        })
    }

    /// Locks on a Redis Cluster through the application's own cluster client: its TLS, login,
    /// timeouts, retries and protocol apply (`options`' timeouts, where set, replace its own on
    /// distlock's connections). distlock opens its own cluster connection from it, and one for
    /// sharded pub/sub at the first wait, which needs the client built with RESP3
    /// (`ClusterClientBuilder::use_protocol(ProtocolVersion::RESP3)`); on a RESP2 client,
    /// waiters ask again every 100 ms instead.
    pub async fn from_cluster_client(
        client: ::redis::cluster::ClusterClient,
        settings: RedisLockSettings,
        options: &Options,
    ) -> Result<Self> {
        Ok(RedisBackend {
            server: Arc::new(Server::from_cluster_client(client, &settings, options).await?),
        })
    }
}

/// `{1, token}` or `{0, ms left}` from an acquire script (the exclusive lock's one number made
/// into that pair by [`exclusive_answer`]); `{2, size}` from a semaphore's whose kept size is not
/// the one asked.
fn attempt((status, value): (i64, i64), req: &LockRequest) -> Result<Attempt> {
    match (status, req.kind) {
        (1, _) => Ok(Attempt::leased(FencingToken(value as u64), req)),
        (0, _) => Ok(Attempt::Held {
            retry_after: u64::try_from(value)
                .ok()
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
        }),
        (2, LockKind::Permit { permits }) => Err(permits_differ(
            NAME,
            &req.name,
            u32::try_from(value).unwrap_or(u32::MAX),
            permits,
        )),
        _ => Err(upgrade_refused(NAME, &req.name)),
    }
}

/// The exclusive lock's `acquire.lua` answers one number: the token when taken, else −1 − the
/// ms the holder's lease has left. (A pair, as the other flavours answer, costs the server a
/// table per take.)
pub(crate) fn exclusive_answer(answer: i64) -> (i64, i64) {
    if answer > 0 {
        (1, answer)
    } else {
        (0, -1 - answer)
    }
}

/// How `release.lua` names the holding of `owner` with `token` (`None`: whichever it has).
pub(crate) fn named_holding(owner: &str, token: Option<FencingToken>) -> String {
    match token {
        Some(token) => format!("{owner}:{token}"),
        None => format!("{owner}:"),
    }
}

/// Runs `req`'s take script with the arguments of its row of the flavour table (`in_line`: a
/// fair waiter holds its place in line) and reads its answer, waiting for the URL's replicas
/// (`?wait_replicas=N`, see `replicas.rs`): a take fewer of them acknowledged is released by its
/// token before the caller hears of it, and answered with [`ErrorKind::NoQuorum`].
async fn take(server: &Server, req: &LockRequest, keys: &Keys, in_line: bool) -> Result<Attempt> {
    if let Some(ack) = server.replica_ack() {
        ack.check_lease(&req.name, req.lease.duration())?;
    }
    let flavour = Flavour::of(req.kind);
    let script = &(flavour.ops)(&SCRIPTS).acquire;
    let args = flavour.take_args(req, keys, in_line);
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let (keys, what) = (&keys.acquire(), flavour.taking);
    let (answer, acks) = match flavour.answer {
        Answer::Number => {
            let (answer, acks) = server.run_acked::<i64>(script, keys, &args, what).await?;
            (exclusive_answer(answer), acks)
        }
        Answer::Pair => server.run_acked(script, keys, &args, what).await?,
    };
    let taken = attempt(answer, req)?;
    let (Some(ack), Some(acks), Attempt::Acquired { token, .. }) =
        (server.replica_ack(), acks, &taken)
    else {
        return Ok(taken);
    };
    let Err(short) = ack.judge(acks, &req.name, what) else {
        return Ok(taken);
    };
    // Undone at once, so the next taker need not wait out the lease.
    let undone = match release_holding(server, req, Some(*token)).await {
        Ok(_) => "the take was undone".to_string(),
        Err(e) => format!(
            "undoing the take failed too, so it ends with its lease: {}",
            crate::error::chain(&e)
        ),
    };
    Err(Error::new(short.kind(), format!("{}; {undone}", short.message())).with_backend(NAME))
}

/// Releases the holding of `req`'s owner: the one of `token`, or with `None` whichever it has.
async fn release_holding(
    server: &Server,
    req: &LockRequest,
    token: Option<FencingToken>,
) -> Result<bool> {
    let k = Keys::new(&server.prefix, req.kind, &req.name);
    let flavour = Flavour::of(req.kind);
    let script = &(flavour.ops)(&SCRIPTS).release;
    let what = "releasing the lock";
    let freed: i64 = match flavour.release {
        Release::Holding => {
            let named = named_holding(req.owner.as_str(), token);
            server.run(script, &k.release(), &[&named], what).await?
        }
        Release::Parts => {
            // '' names whatever holding the owner has (release by owner token).
            let token = token.map(|t| t.to_string()).unwrap_or_default();
            let args = [req.owner.as_str(), &k.channel(), &token, flavour.mode];
            server.run(script, &k.release(), &args, what).await?
        }
    };
    Ok(freed == 1)
}

/// Renews exclusive locks' holdings in one call (`extend_many.lua`), each answered as `extend`
/// answers it. With `?wait_replicas=N` the replicas' count covers the whole call: too few fail
/// every renewal that took effect, as for one.
async fn extend_mutexes(
    server: &Server,
    batch: &[&(LockRequest, FencingToken)],
) -> Vec<Result<Option<Duration>>> {
    if batch.is_empty() {
        return Vec::new();
    }
    // The exclusive lock's one key each, as for `extend.lua`.
    let keys: Vec<String> = batch
        .iter()
        .flat_map(|(req, _)| Keys::new(&server.prefix, req.kind, &req.name).extend())
        .collect();
    let owned: Vec<[String; 2]> = batch
        .iter()
        .map(|(req, token)| [req.lease.as_millis().to_string(), token.to_string()])
        .collect();
    let args: Vec<&str> = batch
        .iter()
        .zip(&owned)
        .flat_map(|((req, _), [lease, token])| [req.owner.as_str(), lease, token])
        .collect();
    let what = &format!("extending the leases of {} locks in one call", batch.len());
    let answer: Result<(Vec<i64>, _)> = server
        .run_acked(&SCRIPTS.extend_many, &keys, &args, what)
        .await;
    let failed = |e: &Error| Err(Error::new(e.kind(), crate::error::chain(e)).with_backend(NAME));
    let (renewed, acks) = match answer {
        Ok((renewed, _)) if renewed.len() != batch.len() => {
            let e = Error::new(
                ErrorKind::Backend,
                format!(
                    "{what}: {} answers to {} renewals",
                    renewed.len(),
                    batch.len()
                ),
            );
            return batch.iter().map(|_| failed(&e)).collect();
        }
        Ok(answer) => answer,
        Err(e) => return batch.iter().map(|_| failed(&e)).collect(),
    };
    let short = match (server.replica_ack(), acks) {
        (Some(ack), Some(acks)) if renewed.contains(&1) => {
            ack.judge(acks, &batch[0].0.name, what).err()
        }
        _ => None,
    };
    renewed
        .into_iter()
        .zip(batch)
        .map(|(renewed, (req, _))| match (&short, renewed) {
            (Some(e), 1) => failed(e),
            (_, renewed) => Ok((renewed == 1).then(|| req.lease.duration())),
        })
        .collect()
}

/// The size the semaphore `name` keeps (`None`: never used) and how many of its permits are
/// held now.
async fn sem_count(server: &Server, name: &LockName) -> Result<(Option<u32>, u32)> {
    let k = Keys::new(&server.prefix, LockKind::Permit { permits: 1 }, name);
    let (size, held): (i64, i64) = server
        .run(
            &SCRIPTS.sem_available,
            &k.sem_count(),
            &[],
            "counting permits",
        )
        .await?;
    let size = u32::try_from(size).ok().filter(|size| *size > 0);
    Ok((size, u32::try_from(held).unwrap_or(u32::MAX)))
}

#[async_trait]
impl Backend for RedisBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leases()
            .notifying()
            .queueing()
            .keeping(Kinds::ALL)
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        let k = Keys::new(&self.server.prefix, req.kind, &req.name);
        // A one-off attempt never joins the fair lock's queue (its waiter does).
        take(&self.server, req, &k, false).await
    }

    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<Option<Duration>> {
        let k = Keys::new(&self.server.prefix, req.kind, &req.name);
        let flavour = Flavour::of(req.kind);
        let lease = req.lease.as_millis().to_string();
        let args = [req.owner.as_str(), &lease, &token.to_string(), flavour.mode];
        let what = "extending the lease";
        let script = &(flavour.ops)(&SCRIPTS).extend;
        let (renewed, acks): (i64, _) = self
            .server
            .run_acked(script, &k.extend(), &args, what)
            .await?;
        // A renewal the replicas did not acknowledge is not confirmed (a failover could forget
        // it): the error leaves the lease at its last acknowledged end, and the watchdog tries
        // again within it.
        if let (1, Some(ack), Some(acks)) = (renewed, self.server.replica_ack(), acks) {
            ack.judge(acks, &req.name, what)?;
        }
        Ok((renewed == 1).then(|| req.lease.duration()))
    }

    fn max_batch(&self) -> usize {
        // A cluster's script may touch one slot only, and each lock has its own: its renewals
        // go one by one.
        if self.server.is_cluster() {
            1
        } else {
            MAX_BATCH
        }
    }

    async fn extend_many(
        &self,
        batch: &[(LockRequest, FencingToken)],
    ) -> Vec<Result<Option<Duration>>> {
        // The exclusive locks in one script; the other flavours (whose keys and checks differ)
        // each by its own call, side by side with it.
        let (mutexes, others): (Vec<usize>, Vec<usize>) =
            (0..batch.len()).partition(|&i| batch[i].0.kind == LockKind::Mutex);
        let singles = futures_util::future::join_all(
            others.iter().map(|&i| self.extend(&batch[i].0, batch[i].1)),
        );
        let mutex_batch: Vec<_> = mutexes.iter().map(|&i| &batch[i]).collect();
        let (many, singles) = tokio::join!(extend_mutexes(&self.server, &mutex_batch), singles);
        let mut answers: Vec<Option<Result<Option<Duration>>>> =
            (0..batch.len()).map(|_| None).collect();
        for (i, answer) in mutexes
            .into_iter()
            .zip(many)
            .chain(others.into_iter().zip(singles))
        {
            answers[i] = Some(answer);
        }
        // Every index was in one of the two parts.
        answers.into_iter().flatten().collect()
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        // Not acknowledged by replicas: a release a failover forgets leaves the lock held only
        // until its lease ends, which is safe.
        release_holding(&self.server, req, token).await
    }

    fn waiter(&self, req: &LockRequest) -> Option<Box<dyn Waiter>> {
        (req.kind == LockKind::Fair)
            .then(|| Box::new(fair::FairWaiter::new(self.server.clone(), req.clone())) as _)
    }

    async fn watch_free(&self, req: &LockRequest) -> Result<Wakeups> {
        let k = Keys::new(&self.server.prefix, req.kind, &req.name);
        Ok(self.server.subscriber.watch(k.channel(), None).await)
    }

    async fn abandon(&self, req: &LockRequest) -> Result<()> {
        // Waiting writers hold readers back until they take the lock or leave; other default
        // waiters leave no trace in the store.
        if req.kind == LockKind::Write {
            let k = Keys::new(&self.server.prefix, req.kind, &req.name);
            let args = [req.owner.as_str(), &k.channel()];
            let what = "leaving a read-write lock's writer queue";
            let _: i64 = self
                .server
                .run(&SCRIPTS.rw_abandon, &k.abandon(), &args, what)
                .await?;
        }
        Ok(())
    }

    crate::backend::offers!(semaphores, elections, latches, inspection);
}

#[async_trait]
impl Semaphores for RedisBackend {
    async fn count_permits(&self, req: &LockRequest) -> Result<PermitCount> {
        let (size, taken) = sem_count(&self.server, &req.name).await?;
        Ok(PermitCount { size, taken })
    }

    async fn set_permits(&self, name: &LockName, permits: u32) -> Result<Option<u32>> {
        let k = Keys::new(&self.server.prefix, LockKind::Permit { permits }, name);
        let args = [permits.to_string(), k.channel()];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let what = "changing a semaphore's size";
        let had: i64 = self
            .server
            .run(&SCRIPTS.sem_set_permits, &k.sem_size(), &args, what)
            .await?;
        Ok(u32::try_from(had).ok().filter(|had| *had > 0))
    }
}

#[async_trait]
impl Elections for RedisBackend {
    async fn elect_write(&self, write: ElectionWrite<'_>) -> Result<bool> {
        election::write(
            &self.server,
            write.election,
            write.term,
            write.value,
            write.ttl,
        )
        .await
    }

    async fn elect_current(&self, election: &LockName) -> Result<Option<ElectionEntry>> {
        Ok(election::read(&self.server, election, "current")
            .await?
            .pop())
    }

    async fn elect_log(
        &self,
        election: &LockName,
        after: Option<u64>,
    ) -> Result<Vec<ElectionEntry>> {
        let what = after.map_or_else(|| "latest".to_string(), |seq| seq.to_string());
        election::read(&self.server, election, &what).await
    }

    async fn watch_election(&self, election: &LockName) -> Result<Wakeups> {
        Ok(election::watch(&self.server, election).await)
    }
}

#[async_trait]
impl Latches for RedisBackend {
    async fn latch_set(&self, name: &LockName, count: u64) -> Result<bool> {
        latch::set(&self.server, name, count).await
    }

    async fn latch_count_down(&self, name: &LockName) -> Result<u64> {
        latch::count_down(&self.server, name).await
    }

    async fn latch_count(&self, name: &LockName) -> Result<u64> {
        latch::count(&self.server, name).await
    }

    async fn watch_latch(&self, name: &LockName) -> Result<Wakeups> {
        Ok(latch::watch(&self.server, name).await)
    }
}

#[async_trait]
impl Inspection for RedisBackend {
    async fn status(&self, which: &Selection) -> Result<Vec<LockStatus>> {
        inspect::status(&self.server, which).await
    }

    async fn warnings(&self) -> Vec<String> {
        self.server.warnings().await
    }

    async fn force_release(&self, name: &LockName, kind: LockKind) -> Result<ForcedRelease> {
        inspect::force_release(&self.server, name, kind).await
    }
}
