//! `mysql://user[:password]@host:port/database?…` (or `mariadb://`) → connect options.

use std::str::FromStr;

use sqlx::mysql::MySqlConnectOptions;

use crate::backends::sql_url::{self, SqlUrl};
use crate::error::{Error, ErrorKind, Result};

pub(super) struct Config {
    pub(super) url: SqlUrl,
    pub(super) options: MySqlConnectOptions,
}

/// Splits distlock's parameters off and hands the rest to sqlx (`ssl-mode=REQUIRED`,
/// `ssl-ca=…`, …). Errors name the URL with its password masked.
pub(super) fn parse(url: &str) -> Result<Config> {
    let url = sql_url::parse(url, super::NAME, "mysql")?;
    let options = MySqlConnectOptions::from_str(&url.driver_url).map_err(|e| {
        Error::new(
            ErrorKind::InvalidUrl,
            format!(
                "{:?} is not a usable MySQL URL: {}",
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
        let c = parse("mariadb://app:s3cret@db.example:3307/locks?ssl-mode=REQUIRED&lock=session")
            .unwrap();
        assert_eq!(c.url.mode, sql_url::LockMode::Session);
        assert!(c.url.driver_url.starts_with("mysql://"));
        assert!(!c.url.redacted.contains("s3cret"));
        let err = parse("mysql://app:s3cret@h:notaport/db").err().unwrap();
        assert_eq!(err.kind(), ErrorKind::InvalidUrl);
        assert!(!format!("{err} {err:?}").contains("s3cret"), "{err}");
    }
}
