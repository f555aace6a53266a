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
///
/// With the `serde` feature it deserializes from a table of the same fields, each a duration
/// written as in a URL (`"500ms"`, `"5s"`, or whole seconds as a number); an absent field keeps
/// the backend's default.
#[derive(Clone, Debug, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
#[non_exhaustive]
pub struct Options {
    /// Longest wait to open a connection (SQL: to get one from the pool). Defaults: Redis 2 s,
    /// PostgreSQL and MySQL 10 s, etcd 5 s, memcached 2 s.
    #[cfg_attr(
        feature = "serde",
        serde(with = "crate::config_serde::optional_duration")
    )]
    pub connect_timeout: Option<Duration>,
    /// Longest wait for one request's answer before it counts as failed (the watchdog then
    /// retries within the lease). Defaults: Redis 5 s, SQL session pings 5 s, SQLite's wait for
    /// another process's write lock 10 s, etcd 5 s, memcached 5 s.
    #[cfg_attr(
        feature = "serde",
        serde(with = "crate::config_serde::optional_duration")
    )]
    pub response_timeout: Option<Duration>,
    /// How long a request that surely never reached the store (connection refused, nothing
    /// written) is tried again before the error reaches the caller, to ride out a restart.
    /// Default: Redis 5 s, etcd 5 s (where every request is safe to repeat, also one that may
    /// have reached the server), memcached 5 s; the SQL pools retry within `connect_timeout`.
    #[cfg_attr(
        feature = "serde",
        serde(with = "crate::config_serde::optional_duration")
    )]
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

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::*;

    #[test]
    fn options_read_durations_as_urls_write_them() {
        let options: Options =
            serde_json::from_str(r#"{"connect_timeout": "500ms", "retry_for": 3}"#).unwrap();
        assert_eq!(options.connect_timeout, Some(Duration::from_millis(500)));
        assert_eq!(options.response_timeout, None);
        assert_eq!(options.retry_for, Some(Duration::from_secs(3)));
        let unknown = serde_json::from_str::<Options>(r#"{"conect_timeout": "1s"}"#);
        assert!(unknown.unwrap_err().to_string().contains("unknown field"));
        let wrong = serde_json::from_str::<Options>(r#"{"retry_for": "soon"}"#);
        assert!(wrong.unwrap_err().to_string().contains("not a duration"));
        let negative = serde_json::from_str::<Options>(r#"{"retry_for": -1}"#);
        assert!(negative.unwrap_err().to_string().contains("negative"));
    }
}
