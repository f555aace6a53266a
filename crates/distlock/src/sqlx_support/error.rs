//! Turning sqlx's errors into distlock's, for the SQL backends and the helpers on a pool.

use crate::error::{Error, ErrorKind};

/// Maps a driver error: unreachable or busy stores are [`ErrorKind::Connection`] (worth a
/// retry), everything the database refused is [`ErrorKind::Backend`]. sqlx's messages carry no
/// connection password (a bad URL is reported by `backends::sql_family::url`, masked, before sqlx sees it).
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
        sqlx::Error::Database(db) if is_session_ended(db.code().as_deref()) => {
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

/// SQLSTATEs of a session the server ended or cannot serve: the connection exceptions (class
/// 08), PostgreSQL's administrator or crash shutdown and "cannot connect now" (57P01–57P03), and
/// MySQL's interrupted statement (70100: `KILL`, which also ends the connection). A server that
/// ends a session while a statement runs answers that statement with one of these before it
/// closes the socket; later statements then fail on the socket itself (an I/O error). Either
/// way the statement did not complete and the session is gone, so it is worth a retry: a waiter
/// must not give up its wait because its connection was ended under it.
fn is_session_ended(sqlstate: Option<&str>) -> bool {
    sqlstate
        .is_some_and(|c| c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03" | "70100"))
}

/// SQLite's BUSY (5) and LOCKED (6), with their extended codes: another process holds the
/// write lock longer than the busy timeout.
fn is_sqlite_busy(code: Option<&str>) -> bool {
    code.and_then(|c| c.parse::<i32>().ok())
        .is_some_and(|c| c & 0xff == 5 || c & 0xff == 6)
}

#[cfg(test)]
mod tests {
    use super::is_session_ended;

    #[test]
    fn ended_sessions_are_connection_errors_and_refusals_are_not() {
        for code in ["57P01", "57P02", "57P03", "08006", "08S01", "70100"] {
            assert!(is_session_ended(Some(code)), "{code}");
        }
        // A unique violation, a deadlock, a lock timeout, a syntax error: the database refused.
        for code in [
            "23505", "40001", "40P01", "55P03", "42601", "57014", "HY000",
        ] {
            assert!(!is_session_ended(Some(code)), "{code}");
        }
        assert!(!is_session_ended(None));
    }
}
