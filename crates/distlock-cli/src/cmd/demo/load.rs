//! The load generator: fires N numbered requests at the instances, round-robin (request n goes
//! to instance n mod K), with at most C in flight, over kept-alive HTTP/1.1 connections.
//! The pause scenario routes around the instance it stops, as a load balancer takes a hung
//! instance out of rotation (see [`Routing`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::service::GAVE_UP;
use crate::cmd::progress::Progress;

/// How many distinct error texts a run keeps for its report.
const ERRORS_KEPT: usize = 5;

/// What the load generator saw.
#[derive(Debug, Default)]
pub(crate) struct Load {
    pub(crate) requests: u64,
    /// 200: sold or counted.
    pub(crate) succeeded: u64,
    /// 409: nothing left to sell.
    pub(crate) sold_out: u64,
    /// 503: the optimistic strategy gave up.
    pub(crate) gave_up: u64,
    /// 412: the store refused a late holder's write (stale fencing token).
    pub(crate) refused: u64,
    /// 423: the request's key was locked past `--lock-wait` (the lock layer's answer).
    pub(crate) busy: u64,
    /// Any other answer, or no answer (the instance failed, the connection broke, timeout).
    pub(crate) failed: u64,
    /// A few of the failures' texts.
    pub(crate) errors: Vec<String>,
    /// Latency of each answered request, in µs.
    pub(crate) latencies_us: Vec<u32>,
    pub(crate) wall: Duration,
}

impl Load {
    /// The `p`-th percentile (0..=100) of the latencies.
    pub(crate) fn percentile(&self, p: f64) -> Duration {
        if self.latencies_us.is_empty() {
            return Duration::ZERO;
        }
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
        Duration::from_micros(u64::from(sorted[rank.min(sorted.len() - 1)]))
    }

    /// Requests answered per second of wall time.
    pub(crate) fn throughput(&self) -> f64 {
        let secs = self.wall.as_secs_f64();
        if secs > 0.0 {
            self.requests as f64 / secs
        } else {
            0.0
        }
    }

    fn merge(&mut self, other: Load) {
        self.succeeded += other.succeeded;
        self.sold_out += other.sold_out;
        self.gave_up += other.gave_up;
        self.refused += other.refused;
        self.busy += other.busy;
        self.failed += other.failed;
        self.latencies_us.extend(other.latencies_us);
        for e in other.errors {
            self.keep_error(e);
        }
    }

    fn keep_error(&mut self, e: String) {
        if self.errors.len() < ERRORS_KEPT && !self.errors.contains(&e) {
            self.errors.push(e);
        }
    }
}

/// Which instance serves which request.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Routing {
    /// Request n goes to instance n mod K.
    RoundRobin,
    /// The pause scenario: request 0 goes to instance 1 alone, which stops its own process
    /// (`pid`) while it holds the lock; once it has stopped (or answered), requests 1 .. go
    /// round-robin to the other instances. Round-robin over all of them would soon have every
    /// request in flight queued at the stopped instance, and how many "+1"s the others made
    /// during the stop, the damage its late write does, would be left to chance (one CI run
    /// saw none).
    AroundStopped { pid: u32 },
}

/// Where request n goes: `path/{n mod keys}?n=n`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target {
    /// The scenario's path.
    pub(crate) path: &'static str,
    /// Keys the requests are spread over.
    pub(crate) keys: u32,
}

impl Target {
    fn uri(self, n: u64) -> String {
        format!("{}/{}?n={n}", self.path, n % u64::from(self.keys.max(1)))
    }
}

/// Sends requests 0 .. `requests` to `target` on `instances`, `concurrency` at a time, each
/// given `timeout` to be answered.
pub(crate) async fn run(
    instances: &[SocketAddr],
    target: Target,
    requests: u64,
    concurrency: u32,
    timeout: Duration,
    routing: Routing,
    progress: &Progress,
) -> Load {
    let started = Instant::now();
    let mut senders = Vec::new();
    let (first, targets): (u64, Vec<usize>) = match routing {
        Routing::AroundStopped { pid } if instances.len() > 1 && requests > 0 => {
            let done = progress.counter();
            let mut worker = Worker::new(instances.to_vec());
            let mut alone = tokio::spawn(async move {
                worker.send(target.uri(0), 0, timeout).await;
                done.fetch_add(1, Ordering::Relaxed);
                worker.load
            });
            let answered = tokio::select! {
                _ = crate::cmd::processes::stopped(pid) => None,
                answered = &mut alone => Some(answered.unwrap_or_default()),
            };
            senders.push(match answered {
                None => alone,
                Some(load) => tokio::spawn(async move { load }),
            });
            (1, (1..instances.len()).collect())
        }
        _ => (0, (0..instances.len()).collect()),
    };
    let next = Arc::new(AtomicU64::new(first));
    let targets = Arc::new(targets);
    senders.extend((0..concurrency.max(1)).map(|_| {
        let next = next.clone();
        let targets = targets.clone();
        let mut worker = Worker::new(instances.to_vec());
        let done = progress.counter();
        tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= requests {
                    break;
                }
                let instance = targets[((n - first) % targets.len() as u64) as usize];
                worker.send(target.uri(n), instance, timeout).await;
                done.fetch_add(1, Ordering::Relaxed);
            }
            worker.load
        })
    }));
    let mut load = Load {
        requests,
        ..Load::default()
    };
    for worker in futures_util::future::join_all(senders).await {
        match worker {
            Ok(w) => load.merge(w),
            Err(e) => {
                load.failed += 1;
                load.keep_error(format!("a load worker failed: {e}"));
            }
        }
    }
    load.wall = started.elapsed();
    load
}

/// One of the C concurrent senders, with a connection to each instance.
struct Worker {
    instances: Vec<SocketAddr>,
    connections: Vec<Option<SendRequest<Empty<Bytes>>>>,
    load: Load,
}

impl Worker {
    fn new(instances: Vec<SocketAddr>) -> Self {
        Worker {
            connections: instances.iter().map(|_| None).collect(),
            instances,
            load: Load::default(),
        }
    }

    async fn send(&mut self, uri: String, target: usize, timeout: Duration) {
        let started = Instant::now();
        let answer = tokio::time::timeout(timeout, self.exchange(target, &uri)).await;
        let answer = match answer {
            Ok(a) => a,
            Err(_) => Err(format!("no answer within {timeout:?}")),
        };
        match answer {
            Ok((status, body)) => {
                let us = started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                self.load.latencies_us.push(us);
                match status {
                    StatusCode::OK => self.load.succeeded += 1,
                    StatusCode::CONFLICT => self.load.sold_out += 1,
                    StatusCode::SERVICE_UNAVAILABLE if body.starts_with(GAVE_UP) => {
                        self.load.gave_up += 1
                    }
                    StatusCode::PRECONDITION_FAILED => self.load.refused += 1,
                    StatusCode::LOCKED => self.load.busy += 1,
                    other => {
                        self.load.failed += 1;
                        let instance = target + 1;
                        self.load.keep_error(format!(
                            "instance {instance} answered {other}: {}",
                            body.trim()
                        ));
                    }
                }
            }
            Err(e) => {
                // The connection may be broken: open a new one for the next request.
                self.connections[target] = None;
                self.load.failed += 1;
                self.load
                    .keep_error(format!("instance {}: {e}", target + 1));
            }
        }
    }

    async fn exchange(&mut self, target: usize, uri: &str) -> Result<(StatusCode, String), String> {
        let addr = self.instances[target];
        let sender = match &mut self.connections[target] {
            Some(s) => s,
            slot => slot.insert(connect(addr).await?),
        };
        sender
            .ready()
            .await
            .map_err(|e| format!("connection to {addr} broke: {e}"))?;
        let request = Request::post(uri)
            .header(hyper::header::HOST, addr.to_string())
            .body(Empty::new())
            .map_err(|e| format!("building the request: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request to {addr} failed: {e}"))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the answer from {addr}: {e}"))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

async fn connect(addr: SocketAddr) -> Result<SendRequest<Empty<Bytes>>, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake with {addr} failed: {e}"))?;
    tokio::spawn(async move {
        // Ends when either side closes; errors surface on the next request instead.
        let _ = connection.await;
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_throughput() {
        let load = Load {
            requests: 100,
            latencies_us: (1..=100).rev().map(|ms| ms * 1000).collect(),
            wall: Duration::from_secs(2),
            ..Load::default()
        };
        assert_eq!(load.percentile(50.0), Duration::from_micros(51_000));
        assert_eq!(load.percentile(99.0), Duration::from_millis(99));
        assert_eq!(load.percentile(100.0), Duration::from_millis(100));
        assert_eq!(load.throughput(), 50.0);
        assert_eq!(Load::default().percentile(99.0), Duration::ZERO);
    }
}
