//! Turning sqlx's errors into distlock's, for the three SQL backends.

use crate::error::{Error, ErrorKind};

/// Maps a driver error: unreachable or busy stores are [`ErrorKind::Connection`] (worth a
/// retry), everything the database refused is [`ErrorKind::Backend`]. sqlx's messages carry no
/// connection password (a bad URL is reported by `sql_url`, masked, before sqlx sees it).
pub(crate) fn from_sqlx(backend: &'static str, what: &str, e: sqlx::Error) -> Error {
    let kind = match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => ErrorKind::Connection,
        sqlx::Error::Database(db)
            if backend == "sqlite" && is_sqlite_busy(db.code().as_deref()) =>
        {
            ErrorKind::Connection
        }
        sqlx::Error::Configuration(_) => ErrorKind::InvalidUrl,
        _ => ErrorKind::Backend,
    };
    // sqlx's Display repeats its cause's text ("error communicating with database: <the I/O
    // error>") and then returns that cause as its source: a printed chain would say it twice.
    // The cause itself becomes our source instead.
    let source: Box<dyn std::error::Error + Send + Sync> = match e {
        sqlx::Error::Io(io) => Box::new(io),
        sqlx::Error::Database(db) => db,
        sqlx::Error::Tls(tls) => tls,
        sqlx::Error::Configuration(config) => config,
        other => Box::new(other),
    };
    Error::new(kind, what.to_string())
        .with_backend(backend)
        .with_boxed_source(source)
}

/// SQLite's BUSY (5) and LOCKED (6), with their extended codes: another process holds the
/// write lock longer than the busy timeout.
fn is_sqlite_busy(code: Option<&str>) -> bool {
    code.and_then(|c| c.parse::<i32>().ok())
        .is_some_and(|c| c & 0xff == 5 || c & 0xff == 6)
}
