//! Talking to one Redis server: the shared command connection, the shared subscriber, running a
//! script, and turning redis-rs errors into distlock's.

use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{
    Cmd, ConnectionAddr, FromRedisValue, Pipeline, RedisError, RedisFuture, Script,
    ServerErrorKind, Value,
};

use super::cluster;
use super::config::{Checked, RedisConfig, RedisLockSettings, RedisTopology};
use super::eviction;
use super::pipelined::{Pipelined, Target};
use super::replicas::ReplicaAck;
use super::sentinel::{self, Sentinels};
use super::subscriber::{Source, Subscriber};
use super::{CONNECT_TIMEOUT, NAME, NOT_SENT_RETRY_FOR, RESPONSE_TIMEOUT};
use crate::error::{Error, ErrorKind, Result};
use crate::options::Options;
pub(crate) use crate::redis_support::from_redis;

/// Refuses TLS until the application has chosen rustls' process-wide crypto provider.
///
/// redis-rs (1.8) builds its rustls `ClientConfig` itself, with `ClientConfig::builder()`, which
/// takes the process-wide default provider, and offers no way to pass a config or a provider
/// (`Client::build_with_tls` takes certificates only). Choosing that default belongs to the
/// application, so the library does not install one; and left to itself, rustls would install
/// one from its crate features, or panic when both ring and aws-lc-rs are built in. Checking
/// first turns both into this error, which says what to do.
fn tls_provider_installed(shown_url: &str) -> Result<()> {
    if rustls::crypto::CryptoProvider::get_default().is_some() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Unsupported,
        format!(
            "{shown_url}: TLS needs rustls' process-wide crypto provider, which the application \
             chooses: install one before connecting, e.g. \
             `rustls::crypto::aws_lc_rs::default_provider().install_default()` (rustls 0.23, \
             its default feature) or `rustls::crypto::ring::default_provider().install_default()` \
             (feature \"ring\", no post-quantum key exchange)"
        ),
    )
    .with_backend(NAME))
}

/// How often a waiter asks again on a server without pub/sub (made from the application's
/// `ConnectionManager` alone).
pub(crate) const POLL_WITHOUT_PUBSUB: Duration = Duration::from_millis(100);

/// How messages name a server made from the application's client: its address, never its login.
fn shown_client(info: &::redis::ConnectionInfo) -> String {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => {
            format!("redis://{host}:{port} (the application's client)")
        }
        ConnectionAddr::TcpTls { host, port, .. } => {
            format!("rediss://{host}:{port} (the application's client)")
        }
        _ => "the application's Redis client".to_string(),
    }
}

/// One server, shared by a client's backend and its waiters.
///
/// Commands from every task share one pipelined connection, so many acquires share writes
/// instead of waiting for each other's round trips (see `pipelined.rs` for why it is not
/// redis-rs' own; TLS connections use redis-rs' `ConnectionManager`). Waiters share one pub/sub
/// connection ([`Subscriber`]).
pub(crate) struct Server {
    conn: Conn,
    /// How long requests that surely were not sent are tried again.
    retry_for: Duration,
    pub(crate) subscriber: Subscriber,
    pub(crate) shown_url: String,
    /// Put before every key and channel (the URL's `?prefix=`, see `keys.rs`), or empty.
    pub(crate) prefix: String,
    /// Behind Sentinel: the task following the master (`sentinel::follow`), stopped with the
    /// server.
    follower: Option<tokio::task::AbortHandle>,
    /// With `?wait_replicas=N`: the connections takes and renewals wait for replicas on.
    acked: Option<AckedConns>,
}

/// The connections of takes and renewals that wait for replicas (`WAIT`), one per request in
/// flight. `WAIT` blocks the connection it is sent on until the replicas answer or its timeout
/// passes, so on the shared connection one take waiting for a missing replica would hold up
/// every release, renewal and take of the client behind it. Kept for reuse when a request ends
/// normally; a request given up mid-way drops its connection (a `WAIT` may still block it).
struct AckedConns {
    ack: ReplicaAck,
    open: OpenConn,
    idle: std::sync::Mutex<Vec<Conn>>,
}

/// How an acknowledged request's connection is opened: as the server's own.
enum OpenConn {
    Pipelined(Target),
    Managed(Box<::redis::Client>, ConnectionManagerConfig),
    /// A cluster client (its response timeout grown by the wait): each connection of it
    /// reaches every master, and the take's pipeline goes to the lock's.
    Cluster(Box<::redis::cluster::ClusterClient>, Duration),
}

/// At most this many idle connections are kept for acknowledged requests.
const IDLE_ACKED_CONNS: usize = 8;

impl AckedConns {
    /// A pipelined `open` is the server's own target: its response timeout grows by the wait,
    /// which the server answers only when it ends (a managed one comes with it grown).
    fn new(ack: ReplicaAck, open: OpenConn) -> Self {
        let open = match open {
            OpenConn::Pipelined(target) => OpenConn::Pipelined(Target {
                response_timeout: target.response_timeout + ack.timeout,
                ..target
            }),
            managed => managed,
        };
        AckedConns {
            ack,
            open,
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    async fn take(&self) -> ::redis::RedisResult<Conn> {
        if let Some(conn) = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(conn);
        }
        Ok(match &self.open {
            // Opened by its first request.
            OpenConn::Pipelined(target) => Conn::Pipelined(Pipelined::new(target.clone())),
            OpenConn::Managed(client, config) => Conn::Managed(
                client
                    .get_connection_manager_with_config(config.clone())
                    .await?,
            ),
            OpenConn::Cluster(client, response_timeout) => {
                let config =
                    ::redis::cluster::ClusterConfig::new().set_response_timeout(*response_timeout);
                Conn::Cluster(client.get_async_connection_with_config(config).await?)
            }
        })
    }

    fn put_back(&self, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < IDLE_ACKED_CONNS {
            idle.push(conn);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(follower) = &self.follower {
            follower.abort();
        }
    }
}

impl Server {
    /// Connects to the store `config` describes, and warns if it may evict lock keys (see
    /// `eviction.rs`). The pub/sub connection opens at the first wait.
    pub(crate) async fn connect_config(config: RedisConfig, options: &Options) -> Result<Self> {
        let shown = config.shown();
        let checked = config.check().map_err(|why| {
            Error::new(ErrorKind::InvalidInput, format!("{shown}: {why}")).with_backend(NAME)
        })?;
        let server = match &config.topology {
            RedisTopology::Server { .. } => Self::open(config, checked, options).await?,
            RedisTopology::Sentinel { .. } => {
                Self::connect_sentinel(config, checked, options).await?
            }
            RedisTopology::Cluster { nodes } => {
                let source = cluster::ClusterSource::Config {
                    nodes: nodes.clone(),
                    username: config.username.clone(),
                    password: config.password.clone(),
                };
                Self::connect_cluster(source, checked.ack, &config.prefix, shown, options).await?
            }
        };
        Ok(server.warn_in_background())
    }

    /// Asks in the background whether the server may evict lock keys: its answer only decides
    /// a log line, and a slow one must not slow the connect (Redlock counts each master's
    /// connect against its connect timeout).
    fn warn_in_background(self) -> Self {
        let (conn, shown_url) = (self.conn.clone(), self.shown_url.clone());
        let behind_sentinel = self.follower.is_some();
        tokio::spawn(async move { warnings(conn, &shown_url, behind_sentinel).await });
        self
    }

    /// What this store's configuration puts at risk, asked of its server (behind Sentinel, the
    /// master now; on a cluster, every master) now: whether it may evict lock keys. Each is
    /// logged the first time this process finds it (see `eviction.rs`).
    pub(crate) async fn warnings(&self) -> Vec<String> {
        warnings(self.conn.clone(), &self.shown_url, self.follower.is_some()).await
    }

    /// The settings of a `ConnectionManager` distlock opens: the options' timeouts, or its
    /// defaults.
    fn manager_config(options: &Options) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.connect_timeout.unwrap_or(CONNECT_TIMEOUT)))
            .set_response_timeout(Some(options.response_timeout.unwrap_or(RESPONSE_TIMEOUT)))
            .set_number_of_retries(3)
            .set_max_delay(Duration::from_millis(500))
    }

    /// The acknowledged requests' connections of a managed server: from `client`, their
    /// response timeout grown by the wait, which the server answers only when it ends.
    fn managed_acks(
        ack: Option<ReplicaAck>,
        client: &::redis::Client,
        options: &Options,
    ) -> Option<AckedConns> {
        ack.map(|ack| {
            let response_timeout = options.response_timeout.unwrap_or(RESPONSE_TIMEOUT);
            let waiting = Self::manager_config(options)
                .set_response_timeout(Some(response_timeout + ack.timeout));
            AckedConns::new(ack, OpenConn::Managed(Box::new(client.clone()), waiting))
        })
    }

    /// A server over the application's own `client` (its address, TLS, login, database and
    /// protocol): a `ConnectionManager` and the subscriber's pub/sub connection, both opened
    /// from it. `shown`: how messages name it.
    pub(crate) async fn from_client(
        client: ::redis::Client,
        settings: &RedisLockSettings,
        options: &Options,
    ) -> Result<Self> {
        let shown = shown_client(client.get_connection_info());
        let ack = settings.check(&shown)?;
        let conn = client
            .get_connection_manager_with_config(Self::manager_config(options))
            .await
            .map_err(|e| from_redis(&format!("connecting to {shown}"), e))?;
        let server = Server {
            retry_for: options.retry_for.unwrap_or(NOT_SENT_RETRY_FOR),
            conn: Conn::Managed(conn),
            acked: Self::managed_acks(ack, &client, options),
            subscriber: Subscriber::start(Source::Fixed(Box::new(client))),
            shown_url: shown,
            prefix: settings.prefix.clone(),
            follower: None,
        };
        Ok(server.warn_in_background())
    }

    /// A server over the application's `ConnectionManager` (its reconnection, timeouts and
    /// login), with pub/sub and acknowledged requests from `client` when given; without it,
    /// waiters ask again every [`POLL_WITHOUT_PUBSUB`], and `wait_replicas` is refused.
    pub(crate) fn from_connection_manager(
        manager: ConnectionManager,
        client: Option<::redis::Client>,
        settings: &RedisLockSettings,
        options: &Options,
    ) -> Result<Self> {
        let shown = match &client {
            Some(client) => shown_client(client.get_connection_info()),
            None => "the application's ConnectionManager".to_string(),
        };
        let ack = settings.check(&shown)?;
        if ack.is_some() && client.is_none() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{shown}: wait_replicas needs connections of its own (WAIT blocks the \
                     connection it is sent on): pass the redis::Client the manager was made from"
                ),
            )
            .with_backend(NAME));
        }
        let (acked, subscriber) = match client {
            Some(client) => (
                Self::managed_acks(ack, &client, options),
                Subscriber::start(Source::Fixed(Box::new(client))),
            ),
            None => (None, Subscriber::polling(POLL_WITHOUT_PUBSUB)),
        };
        let server = Server {
            retry_for: options.retry_for.unwrap_or(NOT_SENT_RETRY_FOR),
            conn: Conn::Managed(manager),
            acked,
            subscriber,
            shown_url: shown,
            prefix: settings.prefix.clone(),
            follower: None,
        };
        Ok(server.warn_in_background())
    }

    /// A server over the application's cluster client (its TLS, login, timeouts, retries and
    /// protocol): sharded pub/sub only when it speaks RESP3.
    pub(crate) async fn from_cluster_client(
        client: ::redis::cluster::ClusterClient,
        settings: &RedisLockSettings,
        options: &Options,
    ) -> Result<Self> {
        let shown = "the application's Redis Cluster client".to_string();
        let ack = settings.check(&shown)?;
        let source = cluster::ClusterSource::App(Box::new(client));
        let server = Self::connect_cluster(source, ack, &settings.prefix, shown, options).await?;
        Ok(server.warn_in_background())
    }

    /// Opens the connection to the one server `config` names.
    async fn open(config: RedisConfig, checked: Checked, options: &Options) -> Result<Self> {
        let shown = config.shown();
        if config.tls {
            tls_provider_installed(&shown)?;
        }
        let client = ::redis::Client::open(checked.info).map_err(|e| {
            Error::new(ErrorKind::InvalidInput, format!("{shown}: {:?}", e.kind()))
                .with_backend(NAME)
        })?;
        let connect_timeout = options.connect_timeout.unwrap_or(CONNECT_TIMEOUT);
        let response_timeout = options.response_timeout.unwrap_or(RESPONSE_TIMEOUT);
        let mut acked = None;
        let failed = |e| {
            from_redis(&format!("connecting to {shown}"), e)
                .with_hint("is redis-server running and listening on that address?")
        };
        let conn = match client.get_connection_info().addr() {
            ConnectionAddr::Tcp(host, port) => {
                let settings = client.get_connection_info().redis_settings();
                let target = Target::new(
                    host.clone(),
                    *port,
                    settings,
                    connect_timeout,
                    response_timeout,
                );
                if let Some(ack) = checked.ack {
                    acked = Some(AckedConns::new(ack, OpenConn::Pipelined(target.clone())));
                }
                let conn = Pipelined::new(target);
                conn.open().await.map_err(failed)?;
                Conn::Pipelined(conn)
            }
            _ => {
                acked = Self::managed_acks(checked.ack, &client, options);
                let conn = client
                    .get_connection_manager_with_config(Self::manager_config(options))
                    .await
                    .map_err(failed)?;
                Conn::Managed(conn)
            }
        };
        Ok(Server {
            retry_for: options.retry_for.unwrap_or(NOT_SENT_RETRY_FOR),
            conn,
            subscriber: Subscriber::start(Source::Fixed(Box::new(client))),
            shown_url: shown,
            prefix: config.prefix,
            follower: None,
            acked,
        })
    }

    /// [`connect_config`](Self::connect_config) behind Sentinel: the master the Sentinels name, and a task
    /// that follows it when a failover moves it (see `sentinel.rs`).
    async fn connect_sentinel(
        config: RedisConfig,
        checked: Checked,
        options: &Options,
    ) -> Result<Self> {
        let RedisTopology::Sentinel {
            sentinels,
            master_name,
        } = config.topology.clone()
        else {
            unreachable!("connect_config sends only Sentinel configurations here");
        };
        let shown = config.shown();
        let connect_timeout = options.connect_timeout.unwrap_or(CONNECT_TIMEOUT);
        let response_timeout = options.response_timeout.unwrap_or(RESPONSE_TIMEOUT);
        // The master's address comes from the Sentinels at each connection.
        let target = Target::new(
            String::new(),
            0,
            checked.info.redis_settings(),
            connect_timeout,
            response_timeout,
        );
        let sentinels = Arc::new(Sentinels::new(
            sentinels,
            master_name,
            checked.info,
            checked.sentinel_login,
            connect_timeout,
            response_timeout,
        ));
        let target = Target {
            sentinels: Some(sentinels.clone()),
            ..target
        };
        // The acknowledged requests' connections are not moved by the follower: one left on a
        // demoted master is refused (`READONLY`) and moves then, and one on a master cut off
        // from its replicas gets too few acknowledgements, so nothing is taken there.
        let acked = checked
            .ack
            .map(|ack| AckedConns::new(ack, OpenConn::Pipelined(target.clone())));
        let conn = Pipelined::new(target);
        conn.open().await.map_err(|e| {
            from_redis(&format!("connecting to {shown}"), e).with_hint(
                "are the Sentinels running, do they monitor a master of that name, and is it up?",
            )
        })?;
        let subscriber = Subscriber::start(Source::Sentinel(sentinels.clone()));
        let follower = tokio::spawn(sentinel::follow(
            sentinels,
            conn.clone(),
            subscriber.follower(),
        ))
        .abort_handle();
        Ok(Server {
            retry_for: options.retry_for.unwrap_or(NOT_SENT_RETRY_FOR),
            conn: Conn::Pipelined(conn),
            subscriber,
            shown_url: shown,
            prefix: config.prefix,
            follower: Some(follower),
            acked,
        })
    }

    /// [`connect_config`](Self::connect_config) to a Redis Cluster: redis-rs' cluster client, which routes
    /// each script to its slot's master, and sharded pub/sub (see `cluster.rs`).
    async fn connect_cluster(
        source: cluster::ClusterSource,
        ack: Option<ReplicaAck>,
        prefix: &str,
        shown: String,
        options: &Options,
    ) -> Result<Self> {
        let parts = cluster::connect(source, ack, options, &shown)
            .await
            .map_err(|e| {
                e.with_hint("are the cluster's nodes running, and is one of them in the URL?")
            })?;
        let acked = ack
            .zip(parts.acked)
            .map(|(ack, (client, response_timeout))| {
                AckedConns::new(ack, OpenConn::Cluster(Box::new(client), response_timeout))
            });
        Ok(Server {
            retry_for: options.retry_for.unwrap_or(NOT_SENT_RETRY_FOR),
            conn: Conn::Cluster(parts.conn),
            subscriber: Subscriber::start_sharded(parts.shards),
            shown_url: shown,
            prefix: prefix.to_string(),
            follower: None,
            acked,
        })
    }

    /// Every key matching `pattern`, by `SCAN` (a few thousand keys a round trip, never blocking
    /// the server as `KEYS` would). A key may be answered twice (SCAN's promise), or be gone by
    /// the time it is read; keys that are not UTF-8 are not distlock's and are left out.
    pub(crate) async fn scan(&self, pattern: &str, what: &str) -> Result<Vec<String>> {
        if let Conn::Cluster(conn) = &self.conn {
            // Each master holds its own slots' keys.
            return cluster::scan(conn, pattern, what).await;
        }
        let mut conn = self.conn.clone();
        let mut cursor: u64 = 0;
        let mut found = Vec::new();
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = ::redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .map_err(|e| from_redis(what, e))?;
            found.extend(keys.into_iter().filter_map(|k| String::from_utf8(k).ok()));
            if next == 0 {
                return Ok(found);
            }
            cursor = next;
        }
    }

    /// Sends the script `text` (`EVAL`, so no `NOSCRIPT` can turn it away) at once, on the open
    /// pipelined connection, behind every request sent on it before and ahead of every one
    /// after, and never reads its answer: for a request that must reach the server after one
    /// whose answer was given up on, without waiting. False when it could not be sent so (no
    /// open connection, or a TLS one): nothing was sent.
    // Only Redlock sends without awaiting.
    #[cfg_attr(not(feature = "redlock"), allow(dead_code))]
    pub(crate) fn send_unawaited(&self, text: &str, keys: &[String], args: &[&str]) -> bool {
        match &self.conn {
            Conn::Pipelined(conn) => conn.send_now(&script_call("EVAL", text, keys, args)),
            Conn::Managed(_) | Conn::Cluster(_) => false,
        }
    }

    /// Runs `script` by hash (loading it after `NOSCRIPT`). A request that surely never reached
    /// the server (connection refused, or the write itself failed) is retried for a while, so a
    /// server restart is ridden out; an error after which the script may have run is returned
    /// (the caller cannot know whether it took effect).
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[String],
        args: &[&str],
        what: &str,
    ) -> Result<T> {
        let mut conn = self.conn.clone();
        let (value, _) = self
            .run_on(&mut conn, script, keys, args, None, what)
            .await?;
        Ok(value)
    }

    /// Whether this is a Redis Cluster (`redis-cluster://`), where one script's keys must share
    /// a slot.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// The replicas each take must reach (`?wait_replicas=N&wait_timeout=D`), if any.
    pub(crate) fn replica_ack(&self) -> Option<&ReplicaAck> {
        self.acked.as_ref().map(|acked| &acked.ack)
    }

    /// [`run`](Self::run), followed by `WAIT` for the URL's replicas on the same connection, in
    /// the same write: the script's answer and how many replicas acknowledged it (all of what
    /// that connection wrote). Without `wait_replicas`, `run` and no count.
    pub(crate) async fn run_acked<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[String],
        args: &[&str],
        what: &str,
    ) -> Result<(T, Option<i64>)> {
        let Some(acked) = &self.acked else {
            return Ok((self.run(script, keys, args, what).await?, None));
        };
        let mut conn = acked
            .take()
            .await
            .map_err(|e| from_redis(&format!("connecting to {}", self.shown_url), e))?;
        let wait = acked.ack.command();
        let answer = self
            .run_on(&mut conn, script, keys, args, Some(&wait), what)
            .await;
        // A connection whose request failed may be broken or still blocked: not reused.
        if answer.is_ok() {
            acked.put_back(conn);
        }
        let (value, acks) = answer?;
        let acks = acks
            .map(::redis::from_redis_value::<i64>)
            .transpose()
            .map_err(|e| from_redis(what, e.into()))?;
        Ok((value, acks))
    }

    /// The loop of `run` on `conn`, with `then` sent right behind the script (its answer
    /// returned as is).
    async fn run_on<T: FromRedisValue>(
        &self,
        conn: &mut Conn,
        script: &Script,
        keys: &[String],
        args: &[&str],
        then: Option<&Cmd>,
        what: &str,
    ) -> Result<(T, Option<Value>)> {
        // A cluster runs the copies that publish to the lock's shard (`SPUBLISH`).
        let in_cluster = matches!(conn, Conn::Cluster(_));
        let script = if in_cluster {
            cluster::sharded(script)
        } else {
            script
        };
        let evalsha = script_call("EVALSHA", script.get_hash(), keys, args);
        let give_up = crate::core::deadline::instant_after(self.retry_for);
        let mut pause = Duration::from_millis(20);
        let mut loaded = false;
        loop {
            let failed = match conn.query_then(&evalsha, then).await {
                Ok((value, then)) => {
                    let value =
                        ::redis::from_redis_value(value).map_err(|e| from_redis(what, e.into()))?;
                    return Ok((value, then));
                }
                // A server that does not know the script (restarted, or flushed): load it and
                // ask again, once.
                Err(e)
                    if e.kind() == ::redis::ErrorKind::Server(ServerErrorKind::NoScript)
                        && !loaded =>
                {
                    loaded = true;
                    script.load_async(conn).await.err()
                }
                Err(e) => Some(e),
            };
            match failed {
                None => {}
                // A replica now (a failover, behind Sentinel): the script wrote nothing there.
                // Leave the node; the retry goes to the master the Sentinels name.
                Some(e)
                    if e.kind() == ::redis::ErrorKind::Server(ServerErrorKind::ReadOnly)
                        && tokio::time::Instant::now() < give_up =>
                {
                    if let Conn::Pipelined(conn) = conn {
                        conn.leave();
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Some(e)
                    if (surely_not_sent(&e) || (in_cluster && cluster::not_run_yet(&e)))
                        && tokio::time::Instant::now() < give_up =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Some(e) => return Err(from_redis(what, e)),
            }
        }
    }
}

/// [`Server::warnings`] of the server `conn` reaches, shown as `shown_url`.
async fn warnings(mut conn: Conn, shown_url: &str, behind_sentinel: bool) -> Vec<String> {
    match &conn {
        Conn::Cluster(cluster) => eviction::check_cluster(cluster, shown_url).await,
        Conn::Pipelined(pipelined) if behind_sentinel => {
            let pipelined = pipelined.clone();
            let info = ::redis::cmd("INFO")
                .arg("memory")
                .query_async(&mut conn)
                .await;
            // The node that answered, unless a failover moved the connection in between.
            let server = match pipelined.node() {
                Some((host, port)) => format!("{shown_url} (master {host}:{port})"),
                None => shown_url.to_string(),
            };
            eviction::judge(info, &server).into_iter().collect()
        }
        _ => eviction::check(&mut conn, shown_url)
            .await
            .into_iter()
            .collect(),
    }
}

/// `EVALSHA` of a script's hash (or `EVAL` of its text), packed once straight from the borrowed
/// keys and arguments (redis-rs' `ScriptInvocation` copies each into a vector of its own first).
fn script_call(verb: &str, script: &str, keys: &[String], args: &[&str]) -> Cmd {
    let size: usize = keys.iter().map(String::len).sum::<usize>()
        + args.iter().map(|a| a.len()).sum::<usize>()
        + script.len()
        + 8;
    let mut call = Cmd::with_capacity(3 + keys.len() + args.len(), size);
    call.arg(verb)
        .arg(script)
        .arg(keys.len())
        .arg(keys)
        .arg(args);
    call
}

/// The command connection: pipelined over plain TCP, redis-rs' own over TLS, redis-rs'
/// cluster client to a Redis Cluster.
#[derive(Clone)]
enum Conn {
    Pipelined(Pipelined),
    Managed(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    /// `call`'s answer, and `then`'s when given, sent right behind it in the same write.
    async fn query_then(
        &mut self,
        call: &Cmd,
        then: Option<&Cmd>,
    ) -> ::redis::RedisResult<(Value, Option<Value>)> {
        let Some(then) = then else {
            return Ok((call.query_async(self).await?, None));
        };
        match self {
            Conn::Pipelined(conn) => {
                let (answer, then) = conn.request_pair(call, then).await?;
                Ok((answer, Some(then)))
            }
            // redis-rs' own connections: a pipeline of the two (a cluster's goes to the node of
            // the script's first key).
            conn => {
                let (answer, then): (Value, Value) = ::redis::pipe()
                    .add_command(call.clone())
                    .add_command(then.clone())
                    .query_async(conn)
                    .await?;
                Ok((answer, Some(then)))
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Pipelined(c) => c.req_packed_command(cmd),
            Conn::Managed(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Pipelined(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Managed(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Pipelined(c) => c.get_db(),
            Conn::Managed(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// True when the request cannot have reached the server: the connection was refused, or
/// writing it failed. (A reset or EOF while awaiting the answer is ambiguous, and not retried.)
/// redis-rs keeps the I/O error kind private, so a failed write is recognised by its text.
fn surely_not_sent(e: &RedisError) -> bool {
    if e.is_connection_refusal() {
        return true;
    }
    let text = e.to_string().to_ascii_lowercase();
    e.is_connection_dropped() && (text.contains("broken pipe") || text.contains("not connected"))
}

trait WithHint {
    fn with_hint(self, hint: &str) -> Self;
}

impl WithHint for Error {
    fn with_hint(self, hint: &str) -> Self {
        if self.kind() != ErrorKind::Connection {
            return self;
        }
        let message = format!("{}; {hint}", self.message());
        let mut out = Error::new(self.kind(), message).with_backend(NAME);
        if let Some(source) = std::error::Error::source(&self) {
            out = out.with_source(SourceText(source.to_string()));
        }
        out
    }
}

/// A source error kept as text (the original is not `Clone`).
#[derive(Debug)]
struct SourceText(String);

impl std::fmt::Display for SourceText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SourceText {}

#[cfg(test)]
mod tests {
    use crate::ErrorKind;

    /// Nothing in the library's unit tests installs a provider, so this process has none: a
    /// `rediss://` connect must say so, before any connection attempt, rather than install one.
    #[tokio::test]
    async fn tls_without_the_applications_provider_is_refused() {
        let err = crate::connect("rediss://:s3cret@127.0.0.1:1")
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        assert!(err.to_string().contains("install_default()"), "{err}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert!(rustls::crypto::CryptoProvider::get_default().is_none());
    }
}
