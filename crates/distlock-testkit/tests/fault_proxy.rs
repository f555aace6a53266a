//! The fault proxy, each fault against a real TCP echo server on loopback and against the real
//! redis-server of scripts/services.sh. Times are asserted only as lower bounds a sleep
//! guarantees, or as an absence during a hold far longer than the wait; never as upper bounds.

use std::time::{Duration, Instant};

use distlock_testkit::faults::{Fault, FaultProxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Longer than any test waits: a chunk held this long is, for the test, held forever.
const FOREVER: Duration = Duration::from_secs(120);
/// How long a test waits to see that nothing arrives.
const QUIET: Duration = Duration::from_millis(300);
/// How long a test waits for something that must arrive.
const PATIENCE: Duration = Duration::from_secs(20);

/// An echo server on a free loopback port; each chunk it receives is also sent on `received`.
async fn echo_server() -> (u16, mpsc::UnboundedReceiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = socket.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let _ = tx.send(buf[..n].to_vec());
                    if socket.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (port, rx)
}

async fn connect(proxy: &FaultProxy) -> TcpStream {
    TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .unwrap()
}

/// Reads exactly `n` bytes within `within`: `None` if they did not come in time.
async fn read_n(socket: &mut TcpStream, n: usize, within: Duration) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; n];
    tokio::time::timeout(within, socket.read_exact(&mut buf))
        .await
        .ok()
        .map(|r| r.expect("read failed"))
        .map(|_| buf)
}

async fn round_trip(socket: &mut TcpStream, message: &[u8]) -> Duration {
    let sent = Instant::now();
    socket.write_all(message).await.unwrap();
    let echoed = read_n(socket, message.len(), PATIENCE).await;
    assert_eq!(echoed.as_deref(), Some(message));
    sent.elapsed()
}

#[tokio::test]
async fn pass_forwards_both_ways_and_a_half_close() {
    let (port, _) = echo_server().await;
    let proxy = FaultProxy::start(port).await.unwrap();
    assert_eq!(proxy.fault(), Fault::Pass);
    let mut socket = connect(&proxy).await;
    round_trip(&mut socket, b"hello").await;
    round_trip(&mut socket, b"again").await;
    // The server sees our FIN and closes too: the read ends cleanly.
    socket.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(PATIENCE, socket.read_to_end(&mut rest)).await;
    assert!(matches!(read, Ok(Ok(0))), "{read:?}");
    assert_eq!(proxy.stats().accepted, 1);
}

#[tokio::test]
async fn delay_holds_requests_and_replies() {
    let (port, mut received) = echo_server().await;
    let proxy = FaultProxy::start(port).await.unwrap();
    let mut socket = connect(&proxy).await;
    let delay = Duration::from_millis(150);
    proxy.set(Fault::Delay {
        delay,
        jitter: Duration::from_millis(50),
    });
    // Held once each way, each hold at least delay - jitter.
    let took = round_trip(&mut socket, b"slow").await;
    assert!(took >= Duration::from_millis(200), "took {took:?}");
    assert_eq!(received.recv().await.as_deref(), Some(&b"slow"[..]));

    // The request itself is held: the server does not see it during a long delay ...
    proxy.set(Fault::Delay {
        delay: FOREVER,
        jitter: Duration::ZERO,
    });
    socket.write_all(b"held").await.unwrap();
    let seen = tokio::time::timeout(QUIET, received.recv()).await;
    assert!(seen.is_err(), "the server got a held request: {seen:?}");
    // ... and ending the fault ends the hold.
    proxy.set(Fault::Pass);
    assert_eq!(
        read_n(&mut socket, 4, PATIENCE).await.as_deref(),
        Some(&b"held"[..])
    );
}

#[tokio::test]
async fn delay_replies_passes_requests_at_once_and_holds_replies() {
    let (port, mut received) = echo_server().await;
    let proxy = FaultProxy::start(port).await.unwrap();
    let mut socket = connect(&proxy).await;
    proxy.set(Fault::DelayReplies {
        delay: FOREVER,
        jitter: Duration::ZERO,
    });
    socket.write_all(b"ping").await.unwrap();
    // The request reaches the server long before a held chunk could have.
    let seen = tokio::time::timeout(PATIENCE, received.recv()).await;
    assert_eq!(seen.ok().flatten().as_deref(), Some(&b"ping"[..]));
    // The reply does not come back while held.
    assert_eq!(read_n(&mut socket, 4, QUIET).await, None);
    proxy.set(Fault::Pass);
    assert_eq!(
        read_n(&mut socket, 4, PATIENCE).await.as_deref(),
        Some(&b"ping"[..])
    );

    // set_delay: the replacement of the redlock branch's DelayProxy.
    let delay = Duration::from_millis(200);
    proxy.set_delay(delay);
    assert!(matches!(proxy.fault(), Fault::DelayReplies { .. }));
    let took = round_trip(&mut socket, b"late").await;
    assert!(took >= delay, "took {took:?}");
    proxy.set_delay(Duration::ZERO);
    assert_eq!(proxy.fault(), Fault::Pass);
}

#[tokio::test]
async fn blackhole_keeps_connections_open_and_forwards_nothing_until_it_ends() {
    let (port, mut received) = echo_server().await;
    let proxy = FaultProxy::start(port).await.unwrap();
    let mut before = connect(&proxy).await;
    round_trip(&mut before, b"up").await;
    received.recv().await.unwrap();

    proxy.set(Fault::Blackhole);
    before.write_all(b"one").await.unwrap();
    // A new connection is accepted, and its writes succeed too.
    let mut during = connect(&proxy).await;
    during.write_all(b"two").await.unwrap();
    assert!(
        tokio::time::timeout(QUIET, received.recv()).await.is_err(),
        "the server got traffic through a blackhole"
    );
    assert_eq!(read_n(&mut before, 3, QUIET).await, None);
    assert_eq!(read_n(&mut during, 3, QUIET).await, None);

    // Healed: what was sent meanwhile arrives, as TCP's retransmissions would deliver it.
    proxy.set(Fault::Pass);
    assert_eq!(
        read_n(&mut before, 3, PATIENCE).await.as_deref(),
        Some(&b"one"[..])
    );
    assert_eq!(
        read_n(&mut during, 3, PATIENCE).await.as_deref(),
        Some(&b"two"[..])
    );
    assert_eq!(proxy.stats().reset, 0);
}

/// Reads until the connection ends: the error kind, or `None` for a clean end of stream.
async fn how_it_ends(socket: &mut TcpStream) -> Option<std::io::ErrorKind> {
    let mut rest = Vec::new();
    match tokio::time::timeout(PATIENCE, socket.read_to_end(&mut rest)).await {
        Err(_) => panic!("the connection is still open"),
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(e.kind()),
    }
}

#[tokio::test]
async fn reset_closes_open_and_new_connections_with_a_rst() {
    let (port, _) = echo_server().await;
    let proxy = FaultProxy::start(port).await.unwrap();
    let mut open = connect(&proxy).await;
    round_trip(&mut open, b"up").await;

    proxy.set(Fault::Reset);
    assert_eq!(
        how_it_ends(&mut open).await,
        Some(std::io::ErrorKind::ConnectionReset)
    );
    // New connections are reset as soon as they are accepted, for as long as the fault lasts.
    for _ in 0..2 {
        let mut new = connect(&proxy).await;
        assert_eq!(
            how_it_ends(&mut new).await,
            Some(std::io::ErrorKind::ConnectionReset)
        );
    }
    assert_eq!(proxy.stats().reset, 3);

    proxy.set(Fault::Pass);
    let mut after = connect(&proxy).await;
    round_trip(&mut after, b"back").await;
}

#[tokio::test]
async fn an_unreachable_upstream_resets_the_client() {
    // A port with nothing listening: bound, then closed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let proxy = FaultProxy::start(port).await.unwrap();
    let mut socket = connect(&proxy).await;
    assert_eq!(
        how_it_ends(&mut socket).await,
        Some(std::io::ErrorKind::ConnectionReset)
    );
    assert_eq!(proxy.stats().upstream_unreachable, 1);
}

/// The Redis of scripts/services.sh, or `None` (said) when `DISTLOCK_SKIP` names redis.
fn redis_port() -> Option<u16> {
    let skip = std::env::var("DISTLOCK_SKIP").unwrap_or_default();
    if skip.split(',').any(|s| s.trim() == "redis") {
        eprintln!("SKIPPED: the fault proxy against Redis, because DISTLOCK_SKIP={skip}");
        return None;
    }
    if std::net::TcpStream::connect("127.0.0.1:6379").is_err() {
        panic!("Redis not reachable at 127.0.0.1:6379; run scripts/services.sh");
    }
    Some(6379)
}

/// Sends PING, expects +PONG within `within`.
async fn ping(socket: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    socket.write_all(b"PING\r\n").await.unwrap();
    read_n(socket, 7, within).await
}

#[tokio::test]
async fn every_fault_against_a_real_redis_server() {
    let Some(port) = redis_port() else { return };
    let proxy = FaultProxy::start(port).await.unwrap();
    let pong = Some(b"+PONG\r\n".to_vec());
    let mut socket = connect(&proxy).await;
    assert_eq!(ping(&mut socket, PATIENCE).await, pong);

    let delay = Duration::from_millis(100);
    proxy.set_delay(delay);
    let sent = Instant::now();
    assert_eq!(ping(&mut socket, PATIENCE).await, pong);
    assert!(sent.elapsed() >= delay);

    proxy.set(Fault::Blackhole);
    assert_eq!(ping(&mut socket, QUIET).await, None);
    proxy.set(Fault::Pass);
    assert_eq!(read_n(&mut socket, 7, PATIENCE).await, pong);

    proxy.set(Fault::Reset);
    assert_eq!(
        how_it_ends(&mut socket).await,
        Some(std::io::ErrorKind::ConnectionReset)
    );
    proxy.set(Fault::Pass);
    let mut again = connect(&proxy).await;
    assert_eq!(ping(&mut again, PATIENCE).await, pong);
}
