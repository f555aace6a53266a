//! The query parameters distlock reads from a `postgres://` or `mysql://` URL before the rest goes
//! to the driver: which lock technique (`lock=lease|session`) and the pool size
//! (`max_connections=N`). Everything else (`sslmode`, `ssl-mode`, `options`, …) is the driver's.

use crate::error::{Error, ErrorKind, Result};
use crate::url::{redact, split_parameters};

/// Which technique a client uses for its locks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum LockMode {
    /// A row in a lock table with an expiry judged by the database clock (the default).
    Lease,
    /// An advisory lock (`pg_advisory_lock`, `GET_LOCK`) held by a dedicated connection.
    Session,
}

/// A database URL split into what distlock reads and what the driver reads.
pub(crate) struct SqlUrl {
    /// The URL for the driver, without distlock's parameters. Contains the password: never show.
    pub(crate) driver_url: String,
    /// The URL as given, password masked: the only form that may appear in messages.
    pub(crate) redacted: String,
    pub(crate) mode: LockMode,
    pub(crate) max_connections: u32,
}

/// The pool size when the URL does not set one: enough for 16 busy tasks on one client.
const DEFAULT_MAX_CONNECTIONS: u32 = 20;

/// Splits `url`, rewriting its scheme to `driver_scheme` (`mariadb://` → `mysql://`).
pub(crate) fn parse(url: &str, backend: &'static str, driver_scheme: &str) -> Result<SqlUrl> {
    let redacted = redact(url);
    let bad = |why: String| {
        Error::new(ErrorKind::InvalidUrl, format!("{redacted:?}: {why}")).with_backend(backend)
    };
    if !url.contains("://") {
        // Without "://" the password cannot be told apart from the rest: do not echo the URL.
        return Err(Error::new(
            ErrorKind::InvalidUrl,
            format!("expected {driver_scheme}://user[:password]@host:port/database"),
        )
        .with_backend(backend));
    }
    let split = split_parameters(url);
    let mut mode = LockMode::Lease;
    let mut max_connections = DEFAULT_MAX_CONNECTIONS;
    for (key, value) in split.own {
        match key {
            "lock" => {
                mode = match value {
                    "lease" => LockMode::Lease,
                    "session" => LockMode::Session,
                    other => {
                        return Err(bad(format!(
                            "lock={other:?} is not a lock technique; use lock=lease (default) or lock=session"
                        )));
                    }
                }
            }
            "max_connections" => {
                max_connections = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| {
                        bad(format!(
                            "max_connections={value:?} is not a number in 1..=1000"
                        ))
                    })?;
            }
            other => {
                return Err(bad(format!(
                    "{other}= is not a parameter of the {backend} backend"
                )));
            }
        }
    }
    let after_scheme = split
        .driver_url
        .split_once("://")
        .map_or("", |(_, rest)| rest);
    let driver_url = format!("{driver_scheme}://{after_scheme}");
    Ok(SqlUrl {
        driver_url,
        redacted,
        mode,
        max_connections,
    })
}

/// A parsed SQL URL and the driver's connect options for it.
pub(crate) struct Config<O> {
    pub(crate) url: SqlUrl,
    pub(crate) options: O,
}

/// Splits distlock's parameters off `url` and hands the rest to the driver (`sslmode=require`,
/// `ssl-mode=REQUIRED`, …). `product` names the database in errors, which carry the URL with its
/// password masked.
pub(crate) fn parse_config<O>(
    url: &str,
    backend: &'static str,
    driver_scheme: &str,
    product: &str,
) -> Result<Config<O>>
where
    O: std::str::FromStr<Err = sqlx::Error>,
{
    let url = parse(url, backend, driver_scheme)?;
    let options = O::from_str(&url.driver_url).map_err(|e| {
        // The driver's message may quote the URL; ours carries the masked one instead.
        Error::new(
            ErrorKind::InvalidUrl,
            format!(
                "{:?} is not a usable {product} URL: {}",
                url.redacted,
                e.to_string().replace(&url.driver_url, "…")
            ),
        )
        .with_backend(backend)
    })?;
    Ok(Config { url, options })
}

/// Opens and closes one plain connection. A pool retries until its timeout and then reports
/// only "timed out"; this fails at once with the cause (refused, bad password, TLS).
pub(crate) async fn probe<O>(backend: &'static str, cfg: &Config<O>) -> Result<()>
where
    O: sqlx::ConnectOptions,
    O::Connection: Sized,
{
    let conn = cfg.options.connect().await.map_err(|e| {
        crate::sqlx_support::error::from_sqlx(
            backend,
            &format!("connecting to {}", cfg.url.redacted),
            e,
        )
    })?;
    let _ = sqlx::Connection::close(conn).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distlock_parameters_are_taken_out() {
        let u = parse(
            "mariadb://root:pw@h:3306/db?lock=session&ssl-mode=REQUIRED&max_connections=5",
            "mysql",
            "mysql",
        )
        .unwrap();
        assert_eq!(u.driver_url, "mysql://root:pw@h:3306/db?ssl-mode=REQUIRED");
        assert_eq!(u.mode, LockMode::Session);
        assert_eq!(u.max_connections, 5);
        assert!(!u.redacted.contains("pw"));

        // A password with an unencoded '@', '/' and '?' goes to the driver %-encoded, so it
        // reads the user-info as distlock does (to the last '@'), not host "p".
        let u = parse(
            "postgresql://u:p@s/s?w@h/db?lock=session",
            "postgres",
            "postgres",
        )
        .unwrap();
        assert_eq!(u.driver_url, "postgres://u:p%40s%2Fs%3Fw@h/db");
        assert_eq!(u.mode, LockMode::Session);
        assert_eq!(u.redacted, "postgresql://***@h/db?lock=session");

        let u = parse("postgres://u@h/db", "postgres", "postgres").unwrap();
        assert_eq!(u.driver_url, "postgres://u@h/db");
        assert_eq!(u.mode, LockMode::Lease);
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_urls_reach_the_driver() {
        let c: Config<sqlx::postgres::PgConnectOptions> = parse_config(
            "postgresql://app:s3cret@db.example:6543/locks?sslmode=require&lock=session",
            "postgres",
            "postgres",
            "PostgreSQL",
        )
        .unwrap();
        assert_eq!(c.options.get_host(), "db.example");
        assert_eq!(c.options.get_port(), 6543);
        assert_eq!(c.options.get_database(), Some("locks"));
        assert_eq!(c.url.mode, LockMode::Session);
        assert!(!c.url.redacted.contains("s3cret"));
        let url = "postgres://app:s3cret@h:notaport/db";
        let err = parse_config::<sqlx::postgres::PgConnectOptions>(
            url,
            "postgres",
            "postgres",
            "PostgreSQL",
        );
        let err = err.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::InvalidUrl);
        assert!(!format!("{err} {err:?}").contains("s3cret"), "{err}");
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_urls_reach_the_driver() {
        let c: Config<sqlx::mysql::MySqlConnectOptions> = parse_config(
            "mariadb://app:s3cret@db.example:3307/locks?ssl-mode=REQUIRED&lock=session",
            "mysql",
            "mysql",
            "MySQL",
        )
        .unwrap();
        assert_eq!(c.url.mode, LockMode::Session);
        assert!(c.url.driver_url.starts_with("mysql://"));
        assert!(!c.url.redacted.contains("s3cret"));
        let url = "mysql://app:s3cret@h:notaport/db";
        let err = parse_config::<sqlx::mysql::MySqlConnectOptions>(url, "mysql", "mysql", "MySQL");
        let err = err.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::InvalidUrl);
        assert!(!format!("{err} {err:?}").contains("s3cret"), "{err}");
    }

    #[test]
    fn bad_parameters_are_typed_errors_without_the_password() {
        for url in [
            "postgres://u:hunter2@h/db?lock=nope",
            "postgres://u:hunter2@h/db?max_connections=0",
            "postgres:u:hunter2@h/db",
        ] {
            let err = parse(url, "postgres", "postgres").err().unwrap();
            assert_eq!(err.kind(), ErrorKind::InvalidUrl);
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }
}
