//! [`Options`]: the timeouts and retries a client uses with its store, for when the defaults do
//! not fit (a store across a slow link, Redlock's per-master budgets, tests that must fail fast).

use std::time::Duration;

/// How long a client waits for its store. Every field left unset keeps the backend's default,
/// which its `docs.md` states.
///
/// ```no_run
/// # async fn demo() -> distlock::Result<()> {
/// // Not run by the doctests: it needs a Redis server (the timeouts matter for network stores).
/// use std::time::Duration;
/// let options = distlock::Options::default()
///     .connect_timeout(Duration::from_millis(500))
///     .response_timeout(Duration::from_secs(1));
/// let client = distlock::connect_with("redis://127.0.0.1:6379", &options).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Options {
    /// Longest wait to open a connection (SQL: to get one from the pool). Defaults: Redis 2 s,
    /// PostgreSQL and MySQL 10 s, etcd 5 s, memcached 2 s.
    pub connect_timeout: Option<Duration>,
    /// Longest wait for one request's answer before it counts as failed (the watchdog then
    /// retries within the lease). Defaults: Redis 5 s, SQL session pings 5 s, SQLite's wait for
    /// another process's write lock 10 s, etcd 5 s, memcached 5 s.
    pub response_timeout: Option<Duration>,
    /// How long a request that surely never reached the store (connection refused, nothing
    /// written) is tried again before the error reaches the caller, to ride out a restart.
    /// Default: Redis 5 s, etcd 5 s (where every request is safe to repeat, also one that may
    /// have reached the server), memcached 5 s; the SQL pools retry within `connect_timeout`.
    pub retry_for: Option<Duration>,
}

impl Options {
    /// Sets [`connect_timeout`](Options::connect_timeout).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Sets [`response_timeout`](Options::response_timeout).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = Some(timeout);
        self
    }

    /// Sets [`retry_for`](Options::retry_for).
    pub fn retry_for(mut self, retry_for: Duration) -> Self {
        self.retry_for = Some(retry_for);
        self
    }
}
