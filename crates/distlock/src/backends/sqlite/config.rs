//! The SQLite store's typed configuration: the file, and how long a write waits for other
//! processes' writes. `sqlite:PATH` has no parameters, so [`SqliteConfig::from_url`] reads only
//! the path.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::Result;

/// Where the SQLite store keeps its locks, and how long a write waits.
///
/// | URL | field |
/// |---|---|
/// | `sqlite:PATH` | [`path`](Self::path) |
/// | (none: [`Options::response_timeout`](crate::Options)) | [`busy_timeout`](Self::busy_timeout) |
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct SqliteConfig {
    /// The database file, created if missing (a sidecar file `PATH-distlock` goes beside it).
    /// Shared by every process on the machine that opens the same path.
    pub path: PathBuf,
    /// How long a take, extend or release waits for other processes' writes before failing
    /// with a connection error. `None`: the `Options`' `response_timeout`, else 10 s.
    #[cfg_attr(
        feature = "serde",
        serde(default, with = "crate::config_serde::optional_duration")
    )]
    pub busy_timeout: Option<Duration>,
}

impl SqliteConfig {
    /// The file at `path`, default busy timeout.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteConfig {
            path: path.into(),
            busy_timeout: None,
        }
    }

    /// Sets [`busy_timeout`](Self::busy_timeout).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = Some(timeout);
        self
    }

    /// Reads `sqlite:PATH` or `sqlite://PATH` (`sqlite:///abs/path`); the errors of
    /// [`connect`](super::SqliteBackend::connect) for no path or an in-memory database.
    pub fn from_url(url: &str) -> Result<Self> {
        Ok(SqliteConfig::new(crate::url::sqlite_path(url)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn from_url_is_the_path() {
        assert_eq!(
            SqliteConfig::from_url("sqlite:///var/lib/app/locks.db").unwrap(),
            SqliteConfig::new("/var/lib/app/locks.db")
        );
        assert_eq!(
            SqliteConfig::from_url("sqlite:./locks.db").unwrap(),
            SqliteConfig::new("./locks.db")
        );
        for url in ["sqlite:", "sqlite::memory:", "postgres://h/db"] {
            let err = SqliteConfig::from_url(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{url}");
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn from_json() {
        let c: SqliteConfig =
            serde_json::from_str(r#"{"path": "/tmp/l.db", "busy_timeout": "250ms"}"#).unwrap();
        assert_eq!(
            c,
            SqliteConfig::new("/tmp/l.db").busy_timeout(Duration::from_millis(250))
        );
        let c: SqliteConfig = serde_json::from_str(r#"{"path": "l.db"}"#).unwrap();
        assert_eq!(c, SqliteConfig::new("l.db"));
        assert!(serde_json::from_str::<SqliteConfig>(r#"{"path": "l.db", "ttl": 1}"#).is_err());
    }
}
