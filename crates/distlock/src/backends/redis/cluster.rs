//! Redis Cluster
//! (`redis-cluster://[user:password@]h1:p1[,h2:p2…][?prefix=P&wait_replicas=N&wait_timeout=D]`):
//! the same scripts, keys and core as one server, over redis-rs' cluster client.
//!
//! * **Routing.** Every key of one lock, election or latch carries the hash tag `{name}`
//!   (`keys.rs`), so each script touches one slot and redis-rs sends it to that slot's master by
//!   its first key. It follows `MOVED` (the slot has a new owner: its slot map is refreshed) and
//!   `ASK` (a slot being migrated: `ASKING` and the script on the importing node), and waits and
//!   retries on `TRYAGAIN` (the script's keys are split between the two nodes of a migration).
//!   Redis refuses a script whose keys are not all on the node that runs it, so a lock half
//!   migrated is never read as free. What redis-rs gives up on, and surely never ran (the cluster
//!   is down, the master of the slot cannot be reached during a failover), `Server::run` tries
//!   again for a while, as for one server.
//! * **Waiting** is by sharded pub/sub: the scripts publish with `SPUBLISH` ([`sharded`]: the
//!   single-server scripts with their `PUBLISH` replaced), and waiters listen with `SSUBSCRIBE`
//!   on the channel's shard, so a release reaches the lock's master and its replicas instead of
//!   every node of the cluster. When a node's connection ends (a failover) or a node drops a
//!   subscription (its slot moved), the subscriber connects again with a fresh slot map,
//!   subscribes every channel on the node serving it now, and wakes every waiter once, since
//!   what was published meanwhile is lost ([`subscribe_sharded`]). Sharded pub/sub needs
//!   Redis 7.0 and RESP3, which the subscriber's connection speaks.
//! * **Inspection.** `status` by prefix `SCAN`s every master ([`scan`]); a status or forced
//!   release of one name goes to its slot's master like any script.
//! * **Replica acknowledgement** (`?wait_replicas=N&wait_timeout=D`, see `replicas.rs`): the
//!   take and its `WAIT` go out as one pipeline, which redis-rs routes by its one keyed command
//!   (the script's first key) to the lock's master, so `WAIT` counts that master's replicas
//!   (redis-rs alone would send a bare `WAIT` to every master and answer the minimum). Each
//!   acknowledged request has a cluster connection of its own ([`ClusterParts::acked`]), since
//!   `WAIT` blocks the node connection it is sent on.
//! * **Fencing tokens** follow the server clock as for `redis-sentinel://` (`prelude.lua`): a
//!   replica promoted by a failover may have missed the last counter steps.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use ::redis::{
    ErrorKind as RedisKind, ProtocolVersion, PushInfo, PushKind, RedisError, RedisResult, Script,
    ServerErrorKind, Value,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::invoke::{POLL_WITHOUT_PUBSUB, from_redis};
use super::replicas::ReplicaAck;
use super::scripts::SHARDED;
use super::subscriber::{self, Command, IDLE_GRACE, Registry, SUBSCRIBE_WAIT};
use super::{CONNECT_TIMEOUT, NAME, RESPONSE_TIMEOUT};
use crate::error::{Error, ErrorKind, Result};
use crate::options::Options;

/// How many times redis-rs tries a request again itself (after `MOVED`, `ASK`, `TRYAGAIN`, a
/// lost connection), waiting 10 ms to 400 ms between tries: a few tenths of a second in all.
/// What is left after that, a failover that takes seconds, `Server::run` rides out.
const REDIRECT_RETRIES: u32 = 6;
const RETRY_WAIT_MIN_MS: u64 = 10;
const RETRY_WAIT_MAX_MS: u64 = 400;

/// Where the cluster connections come from.
pub(super) enum ClusterSource {
    /// Built by distlock from a [`RedisConfig`] (its nodes and login) and the options' timeouts.
    Config {
        nodes: Vec<(String, u16)>,
        username: Option<String>,
        password: Option<String>,
    },
    /// The application's own client (its TLS, login, timeouts and retries apply). Options'
    /// timeouts, where set, replace its own for distlock's connections.
    App(Box<ClusterClient>),
}

/// What the sharded subscriber works with: how to make a cluster client of its own (RESP3),
/// whose pushes (messages, subscription changes) come through the channel it is given. Commands
/// never share its connections: redis-rs 1.8 takes a `sunsubscribe` the server pushes when a
/// slot moves away for the reply to whatever request is in flight on that connection (seen in
/// the resharding test as a take answered by the push), and every later reply would then answer
/// the wrong request. A client is made afresh at each (re)connection, with a channel of its own,
/// so nothing an abandoned connection pushes reaches the subscriber.
pub(super) struct Shards {
    make: Box<MakeClient>,
}

type MakeClient = dyn Fn(
        mpsc::UnboundedSender<PushInfo>,
    ) -> futures_util::future::BoxFuture<'static, RedisResult<ClusterConnection>>
    + Send
    + Sync;

/// What [`connect`] makes.
pub(super) struct ClusterParts {
    /// The command connection, shared by every request.
    pub(super) conn: ClusterConnection,
    /// The subscriber's clients.
    pub(super) shards: Shards,
    /// With `?wait_replicas=`: the client of the acknowledged requests' connections and their
    /// response timeout, grown by the wait (a `WAIT` is answered only when it ends).
    pub(super) acked: Option<(ClusterClient, Duration)>,
}

/// Connects to the cluster `source` names (learns its slots from the first node that answers),
/// and makes the subscriber's client, which connects at the first wait. `ack`: the replica
/// acknowledgement asked; `shown`: the cluster as messages show it.
pub(super) async fn connect(
    source: ClusterSource,
    ack: Option<ReplicaAck>,
    options: &Options,
    shown: &str,
) -> Result<ClusterParts> {
    let rejected = |e: RedisError| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("{shown}: rejected by the Redis client ({:?})", e.kind()),
        )
        .with_backend(NAME)
    };
    let failed = |e| from_redis(&format!("connecting to {shown}"), login_refused(e));
    let (client, pushing, response_timeout) = match source {
        ClusterSource::Config {
            nodes,
            username,
            password,
        } => {
            let connect_timeout = options.connect_timeout.unwrap_or(CONNECT_TIMEOUT);
            let response_timeout = options.response_timeout.unwrap_or(RESPONSE_TIMEOUT);
            let seeds: Vec<String> = nodes
                .iter()
                .map(|(host, port)| format!("redis://{}", super::config::host_port(host, *port)))
                .collect();
            let builder = || {
                let mut builder = ClusterClientBuilder::new(seeds.clone())
                    .connection_timeout(connect_timeout)
                    .response_timeout(response_timeout)
                    .retries(REDIRECT_RETRIES)
                    .min_retry_wait(RETRY_WAIT_MIN_MS)
                    .max_retry_wait(RETRY_WAIT_MAX_MS);
                if let Some(user) = &username {
                    builder = builder.username(user);
                }
                if let Some(password) = &password {
                    builder = builder.password(password);
                }
                builder
            };
            // Sharded pub/sub needs RESP3, on a client of its own (see `Shards`).
            let pushing = builder()
                .use_protocol(ProtocolVersion::RESP3)
                .build()
                .map_err(rejected)?;
            let client = builder().build().map_err(rejected)?;
            (client, pushing, Some(response_timeout))
        }
        // The application's protocol: sharded pub/sub works only if it chose RESP3.
        ClusterSource::App(client) => ((*client).clone(), *client, options.response_timeout),
    };
    // Only what the options set replaces the client's own timeouts.
    let own_timeouts = || {
        let mut config = ClusterConfig::new();
        if let Some(timeout) = options.connect_timeout {
            config = config.set_connection_timeout(timeout);
        }
        if let Some(timeout) = response_timeout {
            config = config.set_response_timeout(timeout);
        }
        config
    };
    let conn = if options.connect_timeout.is_some() || response_timeout.is_some() {
        client
            .get_async_connection_with_config(own_timeouts())
            .await
    } else {
        client.get_async_connection().await
    }
    .map_err(failed)?;
    let acked = ack.map(|ack| {
        (
            client.clone(),
            response_timeout.unwrap_or(RESPONSE_TIMEOUT) + ack.timeout,
        )
    });
    // The subscriber's pushes come through the channel given (RESP3).
    // The response timeout is set again: redis-rs' override replaces the client's with it.
    let subscriber_timeout = response_timeout.unwrap_or(RESPONSE_TIMEOUT);
    let make = move |pushes| {
        let client = pushing.clone();
        let config = ClusterConfig::new()
            .set_push_sender(pushes)
            .set_response_timeout(subscriber_timeout);
        let opened: futures_util::future::BoxFuture<'static, _> =
            Box::pin(async move { client.get_async_connection_with_config(config).await });
        opened
    };
    Ok(ClusterParts {
        conn,
        shards: Shards {
            make: Box::new(make),
        },
        acked,
    })
}

/// `e` as an authentication failure when it is one: redis-rs reports a node that refused the
/// URL's password (or asked for one) while it learns the cluster as an I/O error, "Failed to
/// create initial connections", with the node's refusal only in its text (its kinds are not
/// kept), which would read as an unreachable cluster.
fn login_refused(e: RedisError) -> RedisError {
    let text = e.to_string();
    let refused = ["AuthenticationFailed", "NOAUTH", "WRONGPASS"]
        .iter()
        .any(|sign| text.contains(sign));
    if e.kind() == RedisKind::AuthenticationFailed || !refused {
        return e;
    }
    // The nodes' text (`WRONGPASS …`, `NOAUTH …`) never holds the password.
    RedisError::from((
        RedisKind::AuthenticationFailed,
        "authentication failed",
        text,
    ))
}

/// The variant of `script` a cluster runs: with `SPUBLISH` for `PUBLISH` (see [`SHARDED`]).
pub(super) fn sharded(script: &Script) -> &Script {
    SHARDED.get(script.get_hash()).unwrap_or(script)
}

/// True for an error after which the script surely did not run, and that a cluster mends by
/// itself within seconds: the slot is being migrated (`TRYAGAIN`), or moved and redis-rs' tries
/// ran out while the nodes still disagreed where (`MOVED`, `ASK`: as while a failover
/// spreads), the cluster or the slot's master is down or being failed over (`CLUSTERDOWN`,
/// `MASTERDOWN`, no connection to the slot's node).
pub(super) fn not_run_yet(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        RedisKind::Server(
            ServerErrorKind::TryAgain
                | ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
        ) | RedisKind::ClusterConnectionNotFound
    ) || e.is_connection_refusal()
}

/// The masters of the cluster, as one of them answers `CLUSTER SLOTS`.
pub(crate) async fn masters(conn: &ClusterConnection) -> RedisResult<Vec<(String, u16)>> {
    let mut conn = conn.clone();
    let answer = conn
        .route_command(
            ::redis::cmd("CLUSTER").arg("SLOTS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
        )
        .await?;
    Ok(masters_of(&answer))
}

/// The masters in an answer to `CLUSTER SLOTS`: each range is `[first, last, [host, port,
/// id, …], replicas…]`.
fn masters_of(answer: &Value) -> Vec<(String, u16)> {
    let mut found = Vec::new();
    let Value::Array(ranges) = answer else {
        return found;
    };
    for range in ranges {
        let Value::Array(parts) = range else { continue };
        let Some(Value::Array(master)) = parts.get(2) else {
            continue;
        };
        let host = match master.first() {
            Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
            Some(Value::SimpleString(host)) => host.clone(),
            _ => continue,
        };
        let Some(Value::Int(port)) = master.get(1) else {
            continue;
        };
        let Ok(port) = u16::try_from(*port) else {
            continue;
        };
        if !found.contains(&(host.clone(), port)) {
            found.push((host, port));
        }
    }
    found
}

/// Every key matching `pattern` on every master (see `Server::scan`).
pub(super) async fn scan(
    conn: &ClusterConnection,
    pattern: &str,
    what: &str,
) -> Result<Vec<String>> {
    let failed = |e| from_redis(what, e);
    let mut found = Vec::new();
    for (host, port) in masters(conn).await.map_err(failed)? {
        let mut conn = conn.clone();
        let mut cursor: u64 = 0;
        loop {
            let mut scan = ::redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000);
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: host.clone(),
                port,
            });
            let answer = conn.route_command(scan, routing).await.map_err(failed)?;
            let (next, keys): (u64, Vec<Vec<u8>>) =
                ::redis::from_redis_value(answer).map_err(|e| failed(e.into()))?;
            found.extend(keys.into_iter().filter_map(|k| String::from_utf8(k).ok()));
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(found)
}

/// The live subscription connection: the cluster connection, the pushes of its client, and
/// the channels it has confirmed.
struct Subscriptions {
    conn: ClusterConnection,
    pushes: mpsc::UnboundedReceiver<PushInfo>,
    subscribed: HashSet<String>,
    /// Confirmations and unsubscriptions this task asked for and has not seen yet, by (true for
    /// `SSUBSCRIBE`, false for `SUNSUBSCRIBE`, channel): any other is the server or redis-rs
    /// moving a subscription.
    asked: HashMap<(bool, String), usize>,
}

impl Subscriptions {
    /// A new client and connection, subscribed to `channels`.
    async fn open(shards: &Shards, channels: &[String]) -> RedisResult<Self> {
        let (tx, pushes) = mpsc::unbounded_channel();
        let conn = tokio::time::timeout(SUBSCRIBE_WAIT, (shards.make)(tx))
            .await
            .map_err(|_| timed_out("opening the cluster's pub/sub connection timed out"))??;
        let mut subs = Subscriptions {
            conn,
            pushes,
            subscribed: HashSet::new(),
            asked: HashMap::new(),
        };
        for channel in channels {
            subs.subscribe(channel).await?;
        }
        Ok(subs)
    }

    async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        if self.subscribed.contains(channel) {
            return Ok(());
        }
        *self.asked.entry((true, channel.to_string())).or_default() += 1;
        tokio::time::timeout(SUBSCRIBE_WAIT, self.conn.ssubscribe(channel))
            .await
            .map_err(|_| timed_out("SSUBSCRIBE unanswered"))??;
        self.subscribed.insert(channel.to_string());
        Ok(())
    }

    /// Whether a push of a (un)subscription was asked for by this task (and counts it off).
    fn was_asked(&mut self, subscribing: bool, channel: &str) -> bool {
        let key = (subscribing, channel.to_string());
        match self.asked.get_mut(&key) {
            Some(n) if *n > 1 => {
                *n -= 1;
                true
            }
            Some(_) => self.asked.remove(&key).is_some(),
            None => false,
        }
    }
}

fn timed_out(why: &'static str) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, why))
}

/// Reconnection backoff bounds.
const RECONNECT_MIN: std::time::Duration = std::time::Duration::from_millis(50);
const RECONNECT_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// The subscriber task of a cluster client: `SSUBSCRIBE` for a channel's first waiter,
/// `SUNSUBSCRIBE` once it has had none for [`IDLE_GRACE`], and each message handed to the
/// waiters it is for (as `subscriber.rs` does for one server). When a node's connection is lost
/// (its master died: a failover) or the server drops a subscription (its slot moved away), the
/// whole subscription connection is made again, with a fresh slot map, once that succeeds (with
/// backoff while the failover runs), and every waiter is woken once, since what was published
/// meanwhile is lost.
pub(super) async fn subscribe_sharded(
    shards: Shards,
    registry: Arc<Mutex<Registry>>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut live: Option<Subscriptions> = None;
    let mut idle: HashMap<String, Instant> = HashMap::new();
    // Set once the connection was lost: open it again at this time, then wake everyone.
    let mut reconnect_at: Option<Instant> = None;
    let mut backoff = RECONNECT_MIN;
    // Set when the client cannot subscribe at all (an application's RESP2 client): waiters are
    // then woken every `POLL_WITHOUT_PUBSUB` to ask again, instead of by their timer alone.
    let mut polling = false;
    loop {
        let sweep_at = idle.values().min().copied();
        let sweep = async move {
            match sweep_at {
                Some(oldest) => tokio::time::sleep_until(oldest + IDLE_GRACE).await,
                None => std::future::pending().await,
            }
        };
        let reconnect = async move {
            match reconnect_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let push = async {
            match live.as_mut() {
                Some(subs) => subs.pushes.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            command = commands.recv() => match command {
                None => return,
                Some(Command::Subscribe(channel, ack)) => {
                    idle.remove(&channel);
                    if live.is_none() && reconnect_at.is_none() {
                        // The first wait: connect now.
                        reconnect_at = Some(Instant::now());
                    }
                    if let Some(subs) = live.as_mut()
                        && let Err(e) = subs.subscribe(&channel).await
                    {
                        tracing::debug!("redis cluster SSUBSCRIBE failed: {e}");
                        live = None;
                        reconnect_at = Some(Instant::now() + backoff);
                    }
                    let _ = ack.send(());
                }
                Some(Command::Unsubscribe(channel)) => {
                    if live.as_ref().is_some_and(|s| s.subscribed.contains(&channel)) {
                        idle.insert(channel, Instant::now());
                    }
                }
                Some(Command::Moved(_)) => {}
            },
            () = sweep => {
                let now = Instant::now();
                let wanted: HashSet<String> = subscriber::wanted(&registry).into_iter().collect();
                let expired: Vec<String> = idle
                    .iter()
                    .filter(|(ch, since)| wanted.contains(*ch) || now >= **since + IDLE_GRACE)
                    .map(|(ch, _)| ch.clone())
                    .collect();
                for channel in expired {
                    idle.remove(&channel);
                    if let Some(subs) = live.as_mut()
                        && !wanted.contains(&channel)
                        && subs.subscribed.remove(&channel)
                    {
                        *subs.asked.entry((false, channel.clone())).or_default() += 1;
                        if let Err(e) = subs.conn.sunsubscribe(&channel).await {
                            tracing::debug!("redis cluster SUNSUBSCRIBE failed: {e}");
                        }
                    }
                }
            }
            () = reconnect => {
                let wanted = subscriber::wanted(&registry);
                if wanted.is_empty() {
                    // Nobody waits: connect again at the next wait.
                    reconnect_at = None;
                    live = None;
                    continue;
                }
                if polling {
                    subscriber::wake_all(&registry);
                    reconnect_at = Some(Instant::now() + POLL_WITHOUT_PUBSUB);
                    continue;
                }
                match Subscriptions::open(&shards, &wanted).await {
                    Ok(subs) => {
                        live = Some(subs);
                        reconnect_at = None;
                        backoff = RECONNECT_MIN;
                        subscriber::wake_all(&registry);
                    }
                    // redis-rs refuses `SSUBSCRIBE` on a RESP2 client before sending it.
                    Err(e) if e.kind() == RedisKind::InvalidClientConfig => {
                        tracing::warn!(
                            "redis cluster: the client cannot subscribe ({e}); waiters ask again \
                             every {POLL_WITHOUT_PUBSUB:?} (build the cluster client with RESP3 \
                             for pub/sub)"
                        );
                        polling = true;
                        subscriber::wake_all(&registry);
                        reconnect_at = Some(Instant::now() + POLL_WITHOUT_PUBSUB);
                    }
                    Err(e) => {
                        tracing::debug!("redis cluster pub/sub connection failed: {e}");
                        backoff = (backoff * 2).min(RECONNECT_MAX);
                        reconnect_at = Some(Instant::now() + backoff);
                    }
                }
            }
            push = push => {
                let Some(push) = push else {
                    live = None;
                    reconnect_at = Some(Instant::now());
                    continue;
                };
                let channel = match push.data.first() {
                    Some(Value::BulkString(name)) => String::from_utf8(name.clone()).ok(),
                    _ => None,
                };
                let moved = match (push.kind, channel) {
                    (PushKind::SMessage, Some(channel)) => {
                        let payload = match push.data.get(1) {
                            Some(Value::BulkString(payload)) => payload.as_slice(),
                            _ => &[],
                        };
                        subscriber::dispatch(&registry, &channel, payload);
                        false
                    }
                    // A node's connection ended: its master may have died.
                    (PushKind::Disconnection, _) => true,
                    (kind @ (PushKind::SSubscribe | PushKind::SUnsubscribe), Some(channel)) => {
                        let subscribing = kind == PushKind::SSubscribe;
                        live.as_mut().is_some_and(|s| !s.was_asked(subscribing, &channel))
                    }
                    _ => false,
                };
                if moved {
                    tracing::debug!("redis cluster: a subscription moved or was lost; subscribing again");
                    live = None;
                    reconnect_at = Some(Instant::now() + RECONNECT_MIN);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_are_read_from_cluster_slots() {
        let node = |port: i64| {
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |first, last, master: i64, replica: i64| {
            Value::Array(vec![
                Value::Int(first),
                Value::Int(last),
                node(master),
                node(replica),
            ])
        };
        let answer = Value::Array(vec![
            range(0, 100, 7000, 7003),
            range(101, 200, 7001, 7004),
            range(201, 16383, 7000, 7003),
        ]);
        assert_eq!(
            masters_of(&answer),
            vec![
                ("127.0.0.1".to_string(), 7000),
                ("127.0.0.1".to_string(), 7001)
            ]
        );
        assert!(masters_of(&Value::Nil).is_empty());
    }

    #[test]
    fn cluster_scripts_publish_to_the_shard() {
        let release = &super::super::scripts::SCRIPTS
            .ops(crate::types::LockKind::Mutex)
            .release;
        let hash = release.get_hash();
        assert_ne!(sharded(release).get_hash(), hash, "release publishes");
        assert_eq!(
            sharded(sharded(release)).get_hash(),
            sharded(release).get_hash()
        );
        let latch = &super::super::scripts::SCRIPTS.latch;
        assert_ne!(sharded(latch).get_hash(), latch.get_hash());
    }
}
