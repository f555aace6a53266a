//! `postgres://user[:password]@host:port/database?…` → connect options.

use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;

use crate::backends::sql_url::{self, SqlUrl};
use crate::error::{Error, ErrorKind, Result};

pub(super) struct Config {
    pub(super) url: SqlUrl,
    pub(super) options: PgConnectOptions,
}

/// Splits distlock's parameters off and hands the rest to sqlx (`sslmode=require`,
/// `options=-c search_path=…`, …). Errors name the URL with its password masked.
pub(super) fn parse(url: &str) -> Result<Config> {
    let url = sql_url::parse(url, super::NAME, "postgres")?;
    let options = PgConnectOptions::from_str(&url.driver_url).map_err(|e| {
        // The driver's message may quote the URL; ours carries the masked one instead.
        Error::new(
            ErrorKind::InvalidUrl,
            format!(
                "{:?} is not a usable PostgreSQL URL: {}",
                url.redacted,
                e.to_string().replace(&url.driver_url, "…")
            ),
        )
        .with_backend(super::NAME)
    })?;
    Ok(Config { url, options })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let c = parse("postgresql://app:s3cret@db.example:6543/locks?sslmode=require&lock=session")
            .unwrap();
        assert_eq!(c.options.get_host(), "db.example");
        assert_eq!(c.options.get_port(), 6543);
        assert_eq!(c.options.get_database(), Some("locks"));
        assert_eq!(c.url.mode, sql_url::LockMode::Session);
        assert!(!c.url.redacted.contains("s3cret"));
        let err = parse("postgres://app:s3cret@h:notaport/db").err().unwrap();
        assert_eq!(err.kind(), ErrorKind::InvalidUrl);
        assert!(!format!("{err} {err:?}").contains("s3cret"), "{err}");
    }
}
