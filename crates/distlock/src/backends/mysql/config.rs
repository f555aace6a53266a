//! `mysql://user[:password]@host:port/database?…` (or `mariadb://`) → connect options.

use sqlx::mysql::MySqlConnectOptions;

use crate::backends::sql_family::url as sql_url;
use crate::error::Result;

/// The URL's distlock part and the driver's options.
pub(super) type Config = sql_url::Config<MySqlConnectOptions>;

/// Splits distlock's parameters off and hands the rest to sqlx. Errors name the URL with its
/// password masked.
pub(super) fn parse(url: &str) -> Result<Config> {
    sql_url::parse_config(url, super::NAME, "mysql", "MySQL")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

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
