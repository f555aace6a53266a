//! A TCP proxy between clients and a real server whose behaviour the test (or `distlock
//! torture`) changes while traffic flows: pass, delay with jitter (both ways or replies only),
//! blackhole, reset. A slow link, a partition or a crashed peer's connections, on loopback and
//! without netem or iptables.
//!
//! Each connection through the proxy is one task with one pipe per direction. A pipe reads a
//! chunk, then asks the current [`Fault`] what to do with it before writing it on: pass it, hold
//! it for the delay (chunks of one direction stay in order), or, in a blackhole, keep it until
//! the blackhole ends (what TCP's retransmissions deliver after a partition heals). Switching to
//! [`Fault::Reset`] closes every open connection with a RST on both sides (`SO_LINGER` 0) and
//! resets each new one on accept, until the fault changes. Dropping the proxy closes its listener
//! and every connection through it.
//!
//! A proxy in front of one member of a cluster, on the port the other members dial, can also
//! tell which member a connection comes from ([`FaultProxy::start_between`]: the dialling
//! process, found by its socket) and blackhole only the connections of some members
//! ([`FaultProxy::cut_off`]): with one such proxy per member, a member cut off from its peers
//! while its clients still reach it, the partition that splits a cluster's brain.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::random::Random;
use crate::Failure;

/// What the proxy does to the traffic through it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fault {
    /// Forward everything at once.
    #[default]
    Pass,
    /// Hold each chunk, both ways, for `delay` ± a uniform `jitter`.
    Delay {
        /// The mean hold.
        delay: Duration,
        /// The most a hold differs from `delay`, either way.
        jitter: Duration,
    },
    /// Forward requests at once; hold each reply chunk for `delay` ± `jitter`.
    DelayReplies {
        /// The mean hold.
        delay: Duration,
        /// The most a hold differs from `delay`, either way.
        jitter: Duration,
    },
    /// Accept connections and keep them open, forward nothing either way: a partition as a
    /// client sees it (its writes succeed, no answer comes). What was sent meanwhile is
    /// delivered when the fault changes.
    Blackhole,
    /// Close every connection with a RST, and each new one as soon as it is accepted: a crashed
    /// server host as its clients see it.
    Reset,
}

/// Counts of what went through the proxy, for tests and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted from clients.
    pub accepted: u64,
    /// Connections closed with a RST (open ones when [`Fault::Reset`] began, and new ones
    /// accepted during it).
    pub reset: u64,
    /// Connections refused because the upstream server could not be reached (closed with a
    /// RST too, as the server's own refusal would be).
    pub upstream_unreachable: u64,
    /// Connections open now whose origin the proxy's `identify` could not tell (a proxy started
    /// with [`FaultProxy::start_between`]) and whose client still sends: [`FaultProxy::cut_off`]
    /// cannot cut them. One whose dialler closed it before it was looked up (a ZooKeeper peer
    /// drops the connection it dials to a higher-numbered peer, which dials back) is not counted
    /// once the proxy has read the dialler's end.
    pub unidentified_open: u64,
}

/// What the proxy is told to do: its fault, and the origins whose connections it blackholes
/// whatever the fault.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Orders {
    fault: Fault,
    cut_off: Vec<usize>,
}

impl Orders {
    /// What to do to a connection from `origin`.
    fn fault_for(&self, origin: Option<usize>) -> Fault {
        match origin {
            Some(origin) if self.cut_off.contains(&origin) && self.fault != Fault::Reset => {
                Fault::Blackhole
            }
            _ => self.fault,
        }
    }
}

/// Which origin (a cluster member's index) a connection comes from, given its two loopback
/// ports: the connecting socket's, and the proxy's it connected to.
pub type Identify = Arc<dyn Fn(u16, u16) -> Option<usize> + Send + Sync>;

/// Byte strings and what each is replaced with.
pub type Rewrite = Vec<(Vec<u8>, Vec<u8>)>;

/// What the proxy's tasks share.
struct Shared {
    upstream: SocketAddr,
    /// The current orders; every pipe watches them.
    orders: watch::Sender<Orders>,
    /// Tells each connection's origin, for [`FaultProxy::cut_off`].
    identify: Option<Identify>,
    /// Byte strings replaced in requests ([`FaultProxy::rewrite_requests`]).
    rewrite: Mutex<Arc<Rewrite>>,
    accepted: AtomicU64,
    reset: AtomicU64,
    upstream_unreachable: AtomicU64,
    unidentified: AtomicU64,
    /// For the jitter.
    random: Random,
}

/// A running proxy: `127.0.0.1:port()` leads to the upstream server.
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port in front of `127.0.0.1:upstream`, passing
    /// everything. Call from within a Tokio runtime.
    pub async fn start(upstream: u16) -> Result<Self, Failure> {
        Self::start_to(SocketAddr::from(([127, 0, 0, 1], upstream))).await
    }

    /// Starts a proxy on a free loopback port in front of `upstream`, passing everything.
    pub async fn start_to(upstream: SocketAddr) -> Result<Self, Failure> {
        Self::start_with(upstream, None).await
    }

    /// Starts a proxy in front of `127.0.0.1:upstream` that tells where each connection comes
    /// from by `identify`, so that [`cut_off`] can
    /// blackhole some origins only: the proxy on one cluster member's peer port, `identify`
    /// naming the other member that dialled it.
    ///
    /// [`cut_off`]: FaultProxy::cut_off
    pub async fn start_between(upstream: u16, identify: Identify) -> Result<Self, Failure> {
        Self::start_with(SocketAddr::from(([127, 0, 0, 1], upstream)), Some(identify)).await
    }

    async fn start_with(upstream: SocketAddr, identify: Option<Identify>) -> Result<Self, Failure> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            upstream,
            orders: watch::Sender::new(Orders::default()),
            identify,
            rewrite: Mutex::default(),
            accepted: AtomicU64::new(0),
            reset: AtomicU64::new(0),
            upstream_unreachable: AtomicU64::new(0),
            unidentified: AtomicU64::new(0),
            random: Random::default(),
        });
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let (shared, tasks) = (shared.clone(), tasks.clone());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    shared.accepted.fetch_add(1, Ordering::Relaxed);
                    let connection = tokio::spawn(serve(client, shared.clone()));
                    let mut tasks = tasks.lock().unwrap_or_else(|p| p.into_inner());
                    tasks.retain(|t| !t.is_finished());
                    tasks.push(connection);
                }
            })
        };
        tasks.lock().unwrap_or_else(|p| p.into_inner()).push(accept);
        Ok(FaultProxy {
            port,
            shared,
            tasks,
        })
    }

    /// The port clients connect to (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server the proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// From now on, do `fault` to the traffic (open connections included).
    pub fn set(&self, fault: Fault) {
        self.shared
            .orders
            .send_modify(|orders| orders.fault = fault);
    }

    /// The current fault.
    pub fn fault(&self) -> Fault {
        self.shared.orders.borrow().fault
    }

    /// From now on, replace each `from` with its `to` (of the same length) in what clients send,
    /// within a chunk as read. For a peer that tells another its own address in its first
    /// message (a ZooKeeper quorum peer, which is then dialled back there): the address behind
    /// the proxy is rewritten to the proxy's, so that the dial-back goes through a proxy too.
    pub fn rewrite_requests(&self, rewrite: Rewrite) -> Result<(), Failure> {
        if let Some((from, to)) = rewrite.iter().find(|(from, to)| from.len() != to.len()) {
            return Err(Failure(format!(
                "a proxy rewrites only to the same length: {:?} -> {:?}",
                String::from_utf8_lossy(from),
                String::from_utf8_lossy(to)
            )));
        }
        *self
            .shared
            .rewrite
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Arc::new(rewrite);
        Ok(())
    }

    /// From now on, blackhole the connections (open ones included) from `origins`, as the
    /// proxy's `identify` tells them, whatever the fault; an empty list ends it. What they sent
    /// meanwhile is delivered then, as after a partition heals.
    pub fn cut_off(&self, origins: &[usize]) {
        self.shared
            .orders
            .send_modify(|orders| orders.cut_off = origins.to_vec());
    }

    /// From now on, hold each reply chunk for `delay` (no jitter); zero passes everything.
    pub fn set_delay(&self, delay: Duration) {
        self.set(if delay.is_zero() {
            Fault::Pass
        } else {
            Fault::DelayReplies {
                delay,
                jitter: Duration::ZERO,
            }
        });
    }

    /// What went through so far.
    pub fn stats(&self) -> ProxyStats {
        ProxyStats {
            accepted: self.shared.accepted.load(Ordering::Relaxed),
            reset: self.shared.reset.load(Ordering::Relaxed),
            upstream_unreachable: self.shared.upstream_unreachable.load(Ordering::Relaxed),
            unidentified_open: self.shared.unidentified.load(Ordering::Relaxed),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}

/// Which way a pipe carries bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Request,
    Reply,
}

/// Counts one open connection of no known origin, until dropped with it.
struct Unidentified<'a>(&'a AtomicU64);

impl Drop for Unidentified<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The origin of a connection from loopback port `from` to the proxy's port `to`, asked a few
/// times: a listing of /proc/net/tcp is no snapshot (a socket can be skipped while others come
/// and go between its reads), so one miss does not make a live dialler unknown. A dialler that
/// has closed its socket already (a ZooKeeper peer drops the connection it dials to a
/// higher-numbered one, which dials back) stays unknown.
async fn origin_of(identify: &Identify, from: u16, to: u16) -> Option<usize> {
    for attempt in 0..3 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let identify = identify.clone();
        // It reads /proc: off the runtime's threads.
        let origin = tokio::task::spawn_blocking(move || identify(from, to))
            .await
            .ok()
            .flatten();
        if origin.is_some() {
            return origin;
        }
    }
    None
}

/// Closes `stream` with a RST rather than a FIN.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// One client connection: connect upstream, pipe both ways until both sides close, or reset both
/// when [`Fault::Reset`] begins.
async fn serve(mut client: TcpStream, shared: Arc<Shared>) {
    let origin = match (&shared.identify, client.peer_addr(), client.local_addr()) {
        (Some(identify), Ok(from), Ok(to)) => origin_of(identify, from.port(), to.port()).await,
        _ => None,
    };
    let unidentified = (shared.identify.is_some() && origin.is_none()).then(|| {
        shared.unidentified.fetch_add(1, Ordering::Relaxed);
        Unidentified(&shared.unidentified)
    });
    let mut orders = shared.orders.subscribe();
    if orders.borrow_and_update().fault == Fault::Reset {
        shared.reset.fetch_add(1, Ordering::Relaxed);
        return reset(client);
    }
    let Ok(mut server) = TcpStream::connect(shared.upstream).await else {
        shared.upstream_unreachable.fetch_add(1, Ordering::Relaxed);
        return reset(client);
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let reset_begins = async {
        loop {
            if orders.borrow_and_update().fault == Fault::Reset {
                return;
            }
            if orders.changed().await.is_err() {
                // The proxy is gone; its Drop aborts this task.
                std::future::pending::<()>().await;
            }
        }
    };
    let (client_read, client_write) = client.split();
    let (server_read, server_write) = server.split();
    let requests = async {
        pipe(
            client_read,
            server_write,
            Direction::Request,
            origin,
            &shared,
        )
        .await;
        // Once the client has closed its side, nothing it sends can cross a partition any
        // more: such a connection is no leak, whoever dialled it.
        drop(unidentified);
    };
    let both_ways = futures_util::future::join(
        requests,
        pipe(server_read, client_write, Direction::Reply, origin, &shared),
    );
    tokio::select! {
        _ = both_ways => {}
        _ = reset_begins => {
            shared.reset.fetch_add(1, Ordering::Relaxed);
            reset(client);
            reset(server);
        }
    }
}

/// Copies `from` to `to` a chunk at a time, each chunk treated as the current fault for the
/// connection's `origin` says; at the end of `from`, closes `to` for writing (a half-close
/// passes through).
async fn pipe(
    mut from: tokio::net::tcp::ReadHalf<'_>,
    mut to: tokio::net::tcp::WriteHalf<'_>,
    direction: Direction,
    origin: Option<usize>,
    shared: &Shared,
) {
    let mut faults = shared.orders.subscribe();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // Ask again after each hold: the fault may have changed meanwhile.
        loop {
            let fault = faults.borrow_and_update().fault_for(origin);
            let hold = match fault {
                Fault::Pass => None,
                Fault::Delay { delay, jitter } => Some((delay, jitter)),
                Fault::DelayReplies { delay, jitter } if direction == Direction::Reply => {
                    Some((delay, jitter))
                }
                Fault::DelayReplies { .. } => None,
                Fault::Blackhole | Fault::Reset => {
                    // Reset: `serve` closes the connection; until then nothing goes through.
                    if faults.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
            };
            if let Some((delay, jitter)) = hold {
                // A change of fault ends the hold early: the chunk is treated as the new fault
                // says, counted from the change.
                tokio::select! {
                    _ = tokio::time::sleep(shared.random.around(delay, jitter)) => {}
                    changed = faults.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        continue;
                    }
                }
            }
            break;
        }
        if direction == Direction::Request {
            let rewrite = shared
                .rewrite
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            replace_all(&mut buf[..n], &rewrite);
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Replaces every `from` in `chunk` with its `to`, of the same length.
fn replace_all(chunk: &mut [u8], rewrite: &[(Vec<u8>, Vec<u8>)]) {
    for (from, to) in rewrite {
        let mut at = 0;
        while let Some(found) = chunk[at..]
            .windows(from.len())
            .position(|w| w == from.as_slice())
        {
            let start = at + found;
            chunk[start..start + to.len()].copy_from_slice(to);
            at = start + to.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::replace_all;

    #[test]
    fn rewrites_every_occurrence_in_place() {
        let mut chunk = b"\x00\x0f127.0.0.1:41023|127.0.0.1:41023 127.0.0.1:4102".to_vec();
        let rewrite = vec![(b"127.0.0.1:41023".to_vec(), b"127.0.0.1:35771".to_vec())];
        replace_all(&mut chunk, &rewrite);
        assert_eq!(
            chunk,
            b"\x00\x0f127.0.0.1:35771|127.0.0.1:35771 127.0.0.1:4102".to_vec()
        );
    }
}
