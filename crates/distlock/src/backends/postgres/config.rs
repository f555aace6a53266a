//! `postgres://user[:password]@host:port/database?…` → connect options.

use sqlx::postgres::PgConnectOptions;

use crate::backends::sql_family::url as sql_url;
use crate::error::Result;

/// The URL's distlock part and the driver's options.
pub(super) type Config = sql_url::Config<PgConnectOptions>;

/// Splits distlock's parameters off and hands the rest to sqlx. Errors name the URL with its
/// password masked.
pub(super) fn parse(url: &str) -> Result<Config> {
    sql_url::parse_config(url, super::NAME, "postgres", "PostgreSQL")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

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
