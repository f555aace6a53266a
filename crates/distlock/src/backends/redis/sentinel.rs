//! Redis behind Sentinel (`redis-sentinel://`): where the master is, and following it when a
//! failover moves it. Everything else (scripts, the pipelined connection, the subscriber) is the
//! single-server backend's; only the address each connection opens to comes from here.
//!
//! * Every new connection (the command connection in `pipelined.rs`, the pub/sub one in
//!   `subscriber.rs`) asks the Sentinels, in turn, `SENTINEL get-master-addr-by-name`, and the
//!   command connection checks that the node answers `ROLE` with `master` before it sends
//!   anything: a Sentinel that has not yet seen a failover names a node that is a replica now.
//! * A follower task ([`follow`]) listens to one Sentinel's `+switch-master` and
//!   `+failover-state-reconf-slaves` (a replica was promoted) and, when the master moves, drops
//!   the command connection and the pub/sub connection to the old one, so the next request opens
//!   a connection to the new master and waiters subscribe there (and are woken once, as after any
//!   reconnection). Without it, a client whose connection to the old master
//!   stays open would keep taking locks there until the old master is turned into a replica.
//!   Each time it (re)subscribes it asks where the master is, so a switch it missed while no
//!   Sentinel was reachable is caught up.
//! * A `READONLY` answer (the node became a replica under an open connection) drops the
//!   connection and the request is sent again to the master the Sentinels name (see
//!   `invoke.rs`): a script refused with `READONLY` wrote nothing.
//!
//! Why not redis-rs' `sentinel` module: its client finds the master once and does not follow a
//! failover (redis-rs issue 1438), and it would bring redis-rs' own connection, not the
//! pipelined one every lock operation runs on.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, RedisError, RedisResult};
use futures_util::StreamExt;

use super::config::SentinelLogin;
use super::pipelined::Pipelined;
use super::subscriber::Follower;
use crate::redis_support::{SENTINEL_REFUSED_LOGIN, SENTINEL_WANTS_LOGIN};

/// The Sentinels' channel announcing a new master: `<name> <old ip> <old port> <new ip> <new port>`.
const SWITCH_MASTER: &str = "+switch-master";
/// The Sentinels' channel announcing that a failover promoted a replica and now reconfigures the
/// others: `master <name> <old ip> <old port>`. From then on `get-master-addr-by-name` answers
/// the promoted replica, while `+switch-master` waits for the other replicas to follow it
/// (seconds): the client moves at this one, so it stops writing to the old master early.
const RECONF_REPLICAS: &str = "+failover-state-reconf-slaves";
/// Backoff bounds of the follower between Sentinels that cannot be reached.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// A data node's address.
pub(crate) type Addr = (String, u16);

/// The Sentinels of one master, and how to log in to the data nodes they name.
pub(crate) struct Sentinels {
    /// The Sentinels, in the URL's order.
    addrs: Vec<Addr>,
    master_name: String,
    /// The data nodes' user, password and database (the URL's); the address is set per node.
    node: ConnectionInfo,
    /// The Sentinels' own user and password (`?sentinel_user=&sentinel_password=`), if any.
    login: Option<SentinelLogin>,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// The Sentinel that answered last: asked first next time.
    last_good: AtomicUsize,
}

impl Sentinels {
    pub(crate) fn new(
        addrs: Vec<Addr>,
        master_name: String,
        node: ConnectionInfo,
        login: Option<SentinelLogin>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Self {
        Sentinels {
            addrs,
            master_name,
            node,
            login,
            connect_timeout,
            response_timeout,
            last_good: AtomicUsize::new(0),
        }
    }

    /// Where the master is, as the first Sentinel that knows it says (each asked in turn,
    /// starting with the last that answered). An error when none answers (a connection error,
    /// so a request that needed it counts as not sent and is retried) or none knows the name.
    pub(crate) async fn master(&self) -> RedisResult<Addr> {
        let n = self.addrs.len();
        let start = self.last_good.load(Ordering::Relaxed);
        let mut unknown = false;
        let mut last_error = None;
        for i in 0..n {
            let at = (start + i) % n;
            match self.ask(at).await {
                Ok(Some(addr)) => {
                    self.last_good.store(at, Ordering::Relaxed);
                    return Ok(addr);
                }
                Ok(None) => unknown = true,
                Err(e) => last_error = Some(e),
            }
        }
        if unknown {
            return Err(RedisError::from((
                ::redis::ErrorKind::Client,
                "no Sentinel knows a master of that name (the name after the hosts in the URL)",
                self.master_name.clone(),
            )));
        }
        Err(last_error.unwrap_or_else(|| refused("no Sentinel answered")))
    }

    /// One Sentinel's answer: the master's address, or `None` if it knows no such master.
    async fn ask(&self, at: usize) -> RedisResult<Option<Addr>> {
        let mut conn = self
            .sentinel_connection(at)
            .await
            .map_err(|e| self.refused_login(e))?;
        let answer: Option<(String, u16)> = ::redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master_name)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.refused_login(e))?;
        Ok(answer)
    }

    /// A Sentinel's refusal to log in (a wrong `sentinel_password`, or none given to one that
    /// asks for it) as an error saying it was a Sentinel and which parameters, so it is not taken
    /// for the data nodes' password (the URL's user-info) in the message `from_redis` writes.
    fn refused_login(&self, e: RedisError) -> RedisError {
        let refused = e.kind() == ::redis::ErrorKind::AuthenticationFailed
            || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"));
        if !refused {
            return e;
        }
        let why = match &self.login {
            Some(_) => SENTINEL_REFUSED_LOGIN,
            None => SENTINEL_WANTS_LOGIN,
        };
        // The server's text (`WRONGPASS …`, `NOAUTH …`) never holds the password.
        RedisError::from((::redis::ErrorKind::AuthenticationFailed, why, e.to_string()))
    }

    async fn sentinel_connection(&self, at: usize) -> RedisResult<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout));
        self.sentinel_client(at)?
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// Sentinels are asked without the URL's user and password (those are the data nodes'),
    /// with `sentinel_user` and `sentinel_password` if the URL gives them.
    fn sentinel_client(&self, at: usize) -> RedisResult<::redis::Client> {
        let (host, port) = &self.addrs[at];
        let info = ::redis::IntoConnectionInfo::into_connection_info(ConnectionAddr::Tcp(
            host.clone(),
            *port,
        ))?;
        let Some(login) = &self.login else {
            return ::redis::Client::open(info);
        };
        let mut settings = info.redis_settings().clone().set_password(&login.password);
        if let Some(user) = &login.user {
            settings = settings.set_username(user);
        }
        ::redis::Client::open(info.set_redis_settings(settings))
    }

    /// A redis-rs client of the current master (for the pub/sub connection), and its address.
    pub(crate) async fn master_client(&self) -> RedisResult<(::redis::Client, Addr)> {
        let addr = self.master().await?;
        let info = self
            .node
            .clone()
            .set_addr(ConnectionAddr::Tcp(addr.0.clone(), addr.1));
        Ok((::redis::Client::open(info)?, addr))
    }
}

/// The error of a Sentinel or master that cannot be used now: a refused connection, so a
/// request that needed it surely was not sent and is retried (`invoke::surely_not_sent`).
pub(crate) fn refused(why: &'static str) -> RedisError {
    RedisError::from(io::Error::new(io::ErrorKind::ConnectionRefused, why))
}

/// Whether the answer to `ROLE` says the node is a master.
pub(crate) fn is_master(role: &::redis::Value) -> bool {
    match role {
        ::redis::Value::Array(items) => matches!(
            items.first(),
            Some(::redis::Value::BulkString(role)) if role == b"master"
        ),
        _ => false,
    }
}

/// Follows the master: on each `+switch-master` for this master (and whenever it starts
/// watching a Sentinel, for a switch missed meanwhile), drops the connections to any other node.
/// Runs until aborted (the client is dropped).
pub(crate) async fn follow(sentinels: Arc<Sentinels>, conn: Pipelined, subscriber: Follower) {
    let mut pause = RETRY_MIN;
    let mut at = 0;
    loop {
        match watch(&sentinels, at, &conn, &subscriber).await {
            Ok(()) => pause = RETRY_MIN,
            Err(e) => {
                tracing::debug!("redis sentinel {at}: {e}; trying the next");
                pause = (pause * 2).min(RETRY_MAX);
            }
        }
        at = (at + 1) % sentinels.addrs.len();
        tokio::time::sleep(pause).await;
    }
}

/// Watches Sentinel `at` until its connection ends.
async fn watch(
    sentinels: &Sentinels,
    at: usize,
    conn: &Pipelined,
    subscriber: &Follower,
) -> RedisResult<()> {
    let client = sentinels.sentinel_client(at)?;
    let mut pubsub = tokio::time::timeout(sentinels.connect_timeout, client.get_async_pubsub())
        .await
        .map_err(|_| {
            refused("no pub/sub connection to the Sentinel within the connect timeout")
        })??;
    pubsub.subscribe(&[SWITCH_MASTER, RECONF_REPLICAS]).await?;
    // Subscribed first, then asked: a switch between the two is seen either way.
    if let Some(master) = sentinels.ask(at).await? {
        moved_to(&master, conn, subscriber);
    }
    let mut messages = pubsub.on_message();
    while let Some(message) = messages.next().await {
        let Ok(payload) = std::str::from_utf8(message.get_payload_bytes()) else {
            continue;
        };
        let parts: Vec<&str> = payload.split(' ').collect();
        if message.get_channel_name() == RECONF_REPLICAS {
            if let ["master", name, ..] = parts[..]
                && name == sentinels.master_name
                && let Some(master) = sentinels.ask(at).await?
            {
                tracing::info!("redis sentinel: master {name} promoted at {master:?}");
                moved_to(&master, conn, subscriber);
            }
            continue;
        }
        if let [name, _, _, host, port] = parts[..]
            && name == sentinels.master_name
            && let Ok(port) = port.parse::<u16>()
        {
            tracing::info!("redis sentinel: master {name} moved to {host}:{port}");
            moved_to(&(host.to_string(), port), conn, subscriber);
        }
    }
    Ok(())
}

fn moved_to(master: &Addr, conn: &Pipelined, subscriber: &Follower) {
    conn.leave_unless(master);
    subscriber.moved_to(master);
}

#[cfg(test)]
mod tests {
    use super::is_master;
    use ::redis::Value;

    #[test]
    fn role_answers() {
        let master = Value::Array(vec![
            Value::BulkString(b"master".to_vec()),
            Value::Int(10),
            Value::Array(vec![]),
        ]);
        let replica = Value::Array(vec![
            Value::BulkString(b"slave".to_vec()),
            Value::BulkString(b"127.0.0.1".to_vec()),
            Value::Int(6400),
        ]);
        assert!(is_master(&master));
        assert!(!is_master(&replica));
        assert!(!is_master(&Value::Nil));
    }
}
