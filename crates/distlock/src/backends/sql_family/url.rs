//! From a store's configuration ([`SqlConfig`], read from a `postgres://` or `mysql://` URL or
//! built in code) to the driver's connect options, and the probe that reports a failed
//! connection at once. distlock reads the lock technique (`lock=lease|session`) and the pool size
//! (`max_connections=N`); everything else (`sslmode`, `ssl-mode`, `options`, …) is the driver's.

use super::config::SqlConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::url::redact;

/// Which technique a client uses for its locks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum LockMode {
    /// A row in a lock table with an expiry judged by the database clock (the default).
    Lease,
    /// An advisory lock (`pg_advisory_lock`, `GET_LOCK`) held by a dedicated connection.
    Session,
}

/// A store's configuration as the connecting code uses it.
pub(crate) struct SqlUrl {
    /// The URL, password masked: the only form that may appear in messages.
    pub(crate) redacted: String,
    pub(crate) mode: LockMode,
    pub(crate) max_connections: u32,
}

/// A configuration and the driver's connect options for it.
pub(crate) struct Config<O> {
    pub(crate) url: SqlUrl,
    pub(crate) options: O,
}

/// The driver's connect options for `config` (written as the driver's URL, which it parses:
/// `sslmode=require`, `ssl-mode=REQUIRED`, `options=…`). `shown` is how messages name the
/// store: the URL it was read from, password masked, if any. `product` names the database in
/// errors.
pub(crate) fn driver_config<O>(
    config: &SqlConfig,
    shown: Option<String>,
    backend: &'static str,
    product: &str,
) -> Result<Config<O>>
where
    O: std::str::FromStr<Err = sqlx::Error>,
{
    let driver_url = config.driver_url(backend, product)?;
    let redacted = shown.unwrap_or_else(|| redact(&driver_url));
    let options = O::from_str(&driver_url).map_err(|e| {
        // The driver's message may quote the URL; ours carries the masked one instead.
        Error::new(
            ErrorKind::InvalidUrl,
            format!(
                "{redacted:?} is not a usable {product} configuration: {}",
                e.to_string().replace(&driver_url, "…")
            ),
        )
        .with_backend(backend)
    })?;
    let mode = if config.session_locks {
        LockMode::Session
    } else {
        LockMode::Lease
    };
    Ok(Config {
        url: SqlUrl {
            redacted,
            mode,
            max_connections: config.max_connections,
        },
        options,
    })
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

    /// The configuration of `url`, and the URL its driver gets.
    fn read<O: std::str::FromStr<Err = sqlx::Error>>(
        url: &str,
        backend: &'static str,
    ) -> Result<(Config<O>, String)> {
        let config = SqlConfig::from_url(url)?;
        let driver_url = config.driver_url(backend, "the database")?;
        let read = driver_config(&config, Some(redact(url)), backend, "the database")?;
        Ok((read, driver_url))
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn distlock_parameters_are_taken_out() {
        let (c, driver_url) = read::<sqlx::mysql::MySqlConnectOptions>(
            "mariadb://root:pw@h:3306/db?lock=session&ssl-mode=REQUIRED&max_connections=5",
            "mysql",
        )
        .unwrap();
        assert_eq!(driver_url, "mysql://root:pw@h:3306/db?ssl-mode=REQUIRED");
        assert_eq!(c.url.mode, LockMode::Session);
        assert_eq!(c.url.max_connections, 5);
        assert!(!c.url.redacted.contains("pw"));
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_urls_reach_the_driver() {
        // A password with an unencoded '@', '/' and '?' goes to the driver %-encoded, so it
        // reads the user-info as distlock does (to the last '@'), not host "p".
        let (c, driver_url) = read::<sqlx::postgres::PgConnectOptions>(
            "postgresql://u:p@s/s?w@h/db?lock=session",
            "postgres",
        )
        .unwrap();
        assert_eq!(driver_url, "postgres://u:p%40s%2Fs%3Fw@h/db");
        assert_eq!(c.url.mode, LockMode::Session);
        assert_eq!(c.url.redacted, "postgresql://***@h/db?lock=session");

        let (c, driver_url) =
            read::<sqlx::postgres::PgConnectOptions>("postgres://u@h/db", "postgres").unwrap();
        assert_eq!(driver_url, "postgres://u@h/db");
        assert_eq!(c.url.mode, LockMode::Lease);

        let (c, _) = read::<sqlx::postgres::PgConnectOptions>(
            "postgresql://app:s3cret@db.example:6543/locks?sslmode=require&lock=session",
            "postgres",
        )
        .unwrap();
        assert_eq!(c.options.get_host(), "db.example");
        assert_eq!(c.options.get_port(), 6543);
        assert_eq!(c.options.get_database(), Some("locks"));
        assert_eq!(c.url.mode, LockMode::Session);
        assert!(!c.url.redacted.contains("s3cret"));
        // A parameter the driver refuses: its error, without the password.
        let err = read::<sqlx::postgres::PgConnectOptions>(
            "postgres://app:s3cret@h/db?statement-cache-capacity=many",
            "postgres",
        )
        .err()
        .unwrap();
        assert_eq!(err.kind(), ErrorKind::InvalidUrl);
        assert!(!format!("{err} {err:?}").contains("s3cret"), "{err}");
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_urls_reach_the_driver() {
        let (c, driver_url) = read::<sqlx::mysql::MySqlConnectOptions>(
            "mariadb://app:s3cret@db.example:3307/locks?ssl-mode=REQUIRED&lock=session",
            "mysql",
        )
        .unwrap();
        assert_eq!(c.url.mode, LockMode::Session);
        assert!(driver_url.starts_with("mysql://"));
        assert!(!c.url.redacted.contains("s3cret"));
    }
}
