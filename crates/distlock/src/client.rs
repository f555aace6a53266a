//! `connect(url)` and the [`Client`] every lock hangs off.
//!
//! # URL schemes
//!
//! | scheme | backend | feature |
//! |---|---|---|
//! | `sqlite:PATH`, `sqlite://PATH` | embedded SQLite file, shared by processes on one machine | `sqlite` (default) |
//! | `redis://`, `rediss://` | one Redis server | `redis` |
//! | `postgres://`, `postgresql://` | PostgreSQL | `postgres` |
//! | `mysql://`, `mariadb://` | MySQL / MariaDB | `mysql` |
//!
//! The SQL schemes take a lease lock (a row with an expiry, renewed by the watchdog) by default;
//! `?lock=session` takes session locks instead (`pg_advisory_lock` / `GET_LOCK` on a dedicated
//! connection, freed by the server when the connection ends), e.g.
//! `postgres://app@db:5432/app?lock=session`. `?max_connections=N` sizes the pool (default 20);
//! the drivers' own parameters (`sslmode=require`, `ssl-mode=REQUIRED`, …) pass through.
//!
//! `redlock://`, `zk://`, `etcd://` and `memcached://` are reserved for backends to come and
//! answer [`ErrorKind::Unsupported`] for now. Any other scheme is [`ErrorKind::InvalidUrl`].

use std::fmt;
use std::sync::Arc;

use crate::backend::Backend;
use crate::core::Engine;
use crate::error::{Error, ErrorKind, Result};
use crate::lock::{Lock, MultiLock};
use crate::types::LockKind;

/// The URL used when none is given: an SQLite file in the working directory.
pub const DEFAULT_URL: &str = "sqlite:distlock.db";

/// Every scheme distlock knows, built into this binary or not.
const KNOWN_SCHEMES: &[&str] = &[
    "sqlite",
    "redis",
    "rediss",
    "redlock",
    "postgres",
    "postgresql",
    "mysql",
    "mariadb",
    "zk",
    "etcd",
    "memcached",
];

/// Connects to the store `url` names. See the [module docs](self) for the schemes.
///
/// Errors: [`ErrorKind::InvalidUrl`] for a malformed URL or unknown scheme,
/// [`ErrorKind::Unsupported`] for a scheme this build lacks, [`ErrorKind::Connection`] when the
/// store cannot be reached. Messages never include the URL's password.
pub async fn connect(url: &str) -> Result<Client> {
    let url = url.trim();
    let Some((scheme, _)) = url.split_once(':') else {
        return Err(Error::new(
            ErrorKind::InvalidUrl,
            format!(
                "{:?} has no scheme; expected e.g. sqlite:./locks.db or redis://127.0.0.1:6379",
                redact(url)
            ),
        ));
    };
    let backend: Arc<dyn Backend> = match scheme.to_ascii_lowercase().as_str() {
        #[cfg(feature = "sqlite")]
        "sqlite" => Arc::new(crate::backends::sqlite::SqliteBackend::connect(url).await?),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => Arc::new(crate::backends::redis::RedisBackend::connect(url).await?),
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => {
            Arc::new(crate::backends::postgres::PostgresBackend::connect(url).await?)
        }
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => Arc::new(crate::backends::mysql::MysqlBackend::connect(url).await?),
        known if KNOWN_SCHEMES.contains(&known) => {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("the {known}: backend is not part of this build of distlock"),
            ));
        }
        other => {
            return Err(Error::new(
                ErrorKind::InvalidUrl,
                format!(
                    "unknown scheme {other:?} in {:?}; known: sqlite, redis, rediss, postgres, mysql",
                    redact(url)
                ),
            ));
        }
    };
    Ok(Client::from_backend(backend))
}

/// Query parameters whose values [`redact`] shows: they shape the connection and hold no secret.
/// Every other parameter's value is masked, so a secret under any name (`password`, `pass`,
/// `sslpassword`, `Password`, `pass%77ord`, a name a driver adds tomorrow) never shows.
const SHOWN_PARAMETERS: &[&str] = &[
    // distlock's own.
    "lock",
    "max_connections",
    // sqlx (PostgreSQL, MySQL) and redis-rs.
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "sslca",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "application_name",
    "charset",
    "collation",
    "socket",
    "timezone",
    "time-zone",
    "protocol",
    "db",
];

/// `url` as messages and `Debug` may show it: the user-info password and the value of every
/// query parameter but the harmless ones (`lock`, `sslmode`, …) replaced by `***`, and any
/// fragment but `#insecure` too.
///
/// When the user-info cannot be told apart from the rest (an `@` after a `/`, `?` or `#`, as an
/// unencoded password may hold), everything before the last `@` is masked.
pub fn redact(url: &str) -> String {
    let (prefix, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => url.split_at(url.find(':').map_or(0, |i| i + 1)),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (shown_userinfo, tail) = match (rest[..authority_end].rfind('@'), rest.rfind('@')) {
        (Some(at), _) => {
            let userinfo = &rest[..at];
            let shown = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None => userinfo.to_string(),
            };
            (shown, &rest[at..])
        }
        (None, Some(at)) => ("***".to_string(), &rest[at..]),
        (None, None) => (String::new(), rest),
    };
    let (tail, fragment) = match tail.split_once('#') {
        Some((tail, fragment)) => (tail, Some(fragment)),
        None => (tail, None),
    };
    let mut shown = format!("{prefix}{shown_userinfo}");
    match tail.split_once('?') {
        Some((path, query)) => {
            shown.push_str(path);
            shown.push('?');
            let pairs: Vec<String> = query.split('&').map(redact_parameter).collect();
            shown.push_str(&pairs.join("&"));
        }
        None => shown.push_str(tail),
    }
    match fragment {
        Some("insecure") => shown.push_str("#insecure"),
        Some(_) => shown.push_str("#***"),
        None => {}
    }
    shown
}

/// One `key=value` of a query string, its value masked unless the key is in [`SHOWN_PARAMETERS`].
fn redact_parameter(pair: &str) -> String {
    let key = pair.split_once('=').map_or(pair, |(key, _)| key);
    let harmless = SHOWN_PARAMETERS
        .iter()
        .any(|shown| shown.eq_ignore_ascii_case(key));
    match pair.split_once('=') {
        _ if harmless || pair.is_empty() => pair.to_string(),
        Some((key, _)) => format!("{key}=***"),
        None => "***".to_string(),
    }
}

/// A connection to one store, cheap to clone; every lock, read-write lock and semaphore is made
/// from it. Clones share connections, the watchdogs and the in-process wake-ups.
///
/// ```no_run
/// # async fn demo() -> distlock::Result<()> {
/// let client = distlock::connect("sqlite:./locks.db").await?;
/// let guard = client.lock("report:daily").acquire().await?;
/// // … the work only one instance may do …
/// guard.release().await?;
/// client.shutdown().await; // before exiting: lets background releases finish
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) engine: Arc<Engine>,
}

impl Client {
    /// A client over a backend built by hand (tests, custom stores).
    pub fn from_backend(backend: Arc<dyn Backend>) -> Self {
        Client {
            engine: Arc::new(Engine::new(backend)),
        }
    }

    /// Waits until the work this client queued in the background has finished: the releases of
    /// guards that were dropped instead of released, and the clean-up of acquisitions that were
    /// cancelled or timed out (a take that landed after its caller gave up is released, a place
    /// in a wait queue is left). Call it before the program exits: a runtime that stops first
    /// drops that work, and the locks stay taken until their leases end. Guards still alive keep
    /// their locks.
    pub async fn shutdown(self) {
        self.flush().await;
    }

    /// Waits for the background work queued so far (see [`shutdown`](Client::shutdown)) while
    /// keeping the client.
    pub async fn flush(&self) {
        self.engine.flush().await;
    }

    /// The backend's short name: `"sqlite"`, `"redis"`, …
    pub fn backend_name(&self) -> &'static str {
        self.engine.backend.name()
    }

    /// The store's atomic steps themselves, below locks and guards: for the conformance suite
    /// (which checks each backend's contract directly) and for wrapping a backend. Calls made
    /// here bypass this client's guards, watchdogs and re-entry counts.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.engine.backend
    }

    /// An exclusive, reentrant lock named `name`. Nothing is sent to the store until it is
    /// acquired; an invalid name is reported then, as [`ErrorKind::InvalidName`].
    pub fn lock(&self, name: impl AsRef<str>) -> Lock {
        Lock::new(self.clone(), name.as_ref(), LockKind::Mutex)
    }

    /// A lock that serves waiters first come, first served.
    pub fn fair_lock(&self, name: impl AsRef<str>) -> Lock {
        Lock::new(self.clone(), name.as_ref(), LockKind::Fair)
    }

    /// A read-write lock: many readers or one writer.
    pub fn rw_lock(&self, name: impl AsRef<str>) -> RwLock {
        RwLock {
            client: self.clone(),
            name: name.as_ref().to_string(),
        }
    }

    /// A semaphore with `permits` permits; each acquired permit is a guard with its own lease.
    pub fn semaphore(&self, name: impl AsRef<str>, permits: u32) -> Lock {
        Lock::new(self.clone(), name.as_ref(), LockKind::Permit { permits })
    }

    /// All of `names` or none, taken in a fixed order so that callers naming the same locks in
    /// different orders cannot deadlock.
    pub fn multi_lock<I, S>(&self, names: I) -> MultiLock
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        MultiLock::new(
            self.clone(),
            names.into_iter().map(|n| n.as_ref().to_string()).collect(),
        )
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("backend", &self.engine.backend)
            .finish()
    }
}

/// Both sides of a read-write lock.
#[derive(Clone, Debug)]
pub struct RwLock {
    client: Client,
    name: String,
}

impl RwLock {
    /// The shared side: any number of readers at once, none while a writer holds the lock.
    pub fn read(&self) -> Lock {
        Lock::new(self.client.clone(), &self.name, LockKind::Read)
    }

    /// The exclusive side.
    pub fn write(&self) -> Lock {
        Lock::new(self.client.clone(), &self.name, LockKind::Write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_user_info_passwords() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/x"),
            "postgres://app:***@db:5432/x"
        );
        assert_eq!(redact("redis://:pw@h:1"), "redis://:***@h:1");
        assert_eq!(redact("redis://h:6379/0"), "redis://h:6379/0");
        assert_eq!(redact("mysql://root@h/db"), "mysql://root@h/db");
        assert_eq!(redact("sqlite:./a.db"), "sqlite:./a.db");
        assert_eq!(redact("redis://u:p@ss@h"), "redis://u:***@h");
    }

    #[test]
    fn redact_keeps_harmless_parameters() {
        for url in [
            "postgres://app@db:5432/x?sslmode=require&lock=session&max_connections=5",
            "mysql://root@h/db?ssl-mode=REQUIRED&SSL-CA=/etc/ca.pem",
            "rediss://h:6380/0#insecure",
            "redis://h:6379/0?protocol=resp3",
            "postgres://h/db?",
        ] {
            assert_eq!(redact(url), url);
        }
    }

    #[test]
    fn redact_hides_every_other_parameter_and_malformed_user_info() {
        for (url, shown) in [
            (
                "postgres://u@h:1/t?password=s3cret",
                "postgres://u@h:1/t?password=***",
            ),
            (
                "postgres://u@h/t?sslmode=require&sslpassword=s3cret&lock=session",
                "postgres://u@h/t?sslmode=require&sslpassword=***&lock=session",
            ),
            ("redis://h/0?PassWord=s3cret", "redis://h/0?PassWord=***"),
            (
                "redis://h/0?pass%77ord=s3cret",
                "redis://h/0?pass%77ord=***",
            ),
            (
                "mysql://h/db?ssl-key-password=s3cret",
                "mysql://h/db?ssl-key-password=***",
            ),
            (
                "redis://h?token=s3cret&auth=s3cret",
                "redis://h?token=***&auth=***",
            ),
            ("redis://h?s3cret", "redis://h?***"),
            (
                "sqlite:/tmp/a.db?password=s3cret",
                "sqlite:/tmp/a.db?password=***",
            ),
            ("rediss://h#s3cret", "rediss://h#***"),
            // An unencoded '/', '?' or '#' in a password.
            ("postgres://u:s3/cret@h/db", "postgres://***@h/db"),
            ("redis://u:s3?cret@h", "redis://***@h"),
            ("redis://u:s3#cret@h:1", "redis://***@h:1"),
            ("postgres:u:s3cret@h/db", "postgres:u:***@h/db"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[tokio::test]
    async fn bad_urls_are_typed_errors() {
        let err = connect("nonsense").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidUrl);
        let err = connect("ftp://u:hunter2@h").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidUrl);
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let err = connect("zk://127.0.0.1:2181").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
    }
}
