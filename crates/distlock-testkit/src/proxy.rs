//! A TCP proxy in front of a real server that delays the server's replies by a delay the test
//! changes while it runs: a slow or distant store, without a fake one.
//!
//! Requests go through at once; each chunk of reply is held for the current delay before it is
//! passed on (chunks of one connection stay in order). Dropping the proxy closes its listener and
//! every connection through it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::Failure;

/// A running proxy: `127.0.0.1:port()` leads to the upstream server.
pub struct DelayProxy {
    port: u16,
    delay_us: Arc<AtomicU64>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl DelayProxy {
    /// Starts a proxy on a free loopback port in front of `127.0.0.1:upstream`, without delay.
    /// Call from within a Tokio runtime.
    pub async fn start(upstream: u16) -> Result<Self, Failure> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let delay_us = Arc::new(AtomicU64::new(0));
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (delay_us, tasks) = (delay_us.clone(), tasks.clone());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let up = tokio::spawn(pipe(client_read, server_write, None));
                    let down =
                        tokio::spawn(pipe(server_read, client_write, Some(delay_us.clone())));
                    let mut tasks = tasks.lock().unwrap_or_else(|p| p.into_inner());
                    tasks.retain(|t| !t.is_finished());
                    tasks.extend([up, down]);
                }
            })
        };
        tasks.lock().unwrap_or_else(|p| p.into_inner()).push(accept);
        Ok(DelayProxy {
            port,
            delay_us,
            tasks,
        })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// From now on, each reply chunk is held back this long.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_us
            .store(delay.as_micros() as u64, Ordering::Relaxed);
    }
}

impl Drop for DelayProxy {
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

/// Copies `from` to `to`, holding each chunk for the current `delay` (if any).
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay_us: Option<Arc<AtomicU64>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(delay) = &delay_us {
            let us = delay.load(Ordering::Relaxed);
            if us > 0 {
                tokio::time::sleep(Duration::from_micros(us)).await;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
