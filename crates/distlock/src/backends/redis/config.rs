//! `redis://[user:password@]host:port[/db]` and `rediss://…` → connection settings.
//!
//! The URL is checked here so a typo gets a precise [`ErrorKind::InvalidUrl`] naming the part at
//! fault; redis-rs then builds its connection info from the same string. Every message shows the
//! URL through [`crate::redact`], so a password never reaches an error, a log line or `Debug`.

use crate::error::{Error, ErrorKind, Result};
use crate::url::{authority, for_driver, redact, userinfo_end};

/// What `connect` needs from the URL.
pub(super) struct RedisConfig {
    /// The URL with its password masked: the only form ever shown.
    pub(super) shown: String,
    /// `rediss://`: TLS (rustls).
    pub(super) tls: bool,
    /// redis-rs's settings, password included.
    pub(super) info: redis::ConnectionInfo,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not `info`: it holds the password.
        f.debug_struct("RedisConfig")
            .field("url", &self.shown)
            .field("tls", &self.tls)
            .finish()
    }
}

const EXPECTED: &str = "redis://[user:password@]host:port[/db] or rediss://…";

fn invalid(url: &str, why: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::InvalidUrl,
        format!("{:?}: {why}; expected {EXPECTED}", redact(url)),
    )
    .with_backend("redis")
}

/// Checks `url` and turns it into connection settings.
pub(super) fn parse(url: &str) -> Result<RedisConfig> {
    let (tls, rest) = if let Some(rest) = url.strip_prefix("rediss://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("redis://") {
        (false, rest)
    } else {
        return Err(invalid(url, "not a redis:// or rediss:// URL"));
    };
    let servers = authority(url, "redis", EXPECTED)?;
    if servers.hosts.len() != 1 {
        return Err(invalid(
            url,
            "one server only (for several independent masters, use redlock://)",
        ));
    }
    let hosts_and_rest = &rest[userinfo_end(rest).map_or(0, |at| at + 1)..];
    let authority_end = hosts_and_rest
        .find(['/', '?', '#'])
        .unwrap_or(hosts_and_rest.len());
    let path = hosts_and_rest[authority_end..]
        .split(['?', '#'])
        .next()
        .unwrap_or("")
        .trim_start_matches('/');
    if !path.is_empty() && path.parse::<u32>().is_err() {
        return Err(invalid(
            url,
            "the database (after the /) is not a number, as in redis://host:port/0",
        ));
    }
    let info = redis::IntoConnectionInfo::into_connection_info(for_driver(url)).map_err(|e| {
        invalid(
            url,
            format!("rejected by the Redis client ({:?})", e.kind()),
        )
    })?;
    Ok(RedisConfig {
        shown: redact(url),
        tls,
        info,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_urls() {
        let c = parse("redis://127.0.0.1:6379").unwrap();
        assert!(!c.tls);
        assert_eq!(c.shown, "redis://127.0.0.1:6379");
        let c = parse("rediss://app:s3cret@cache.example:6380/2").unwrap();
        assert!(c.tls);
        assert_eq!(c.shown, "rediss://app:***@cache.example:6380/2");
        assert_eq!(c.info.redis_settings().db(), 2);
        assert_eq!(c.info.redis_settings().username(), Some("app"));
        assert!(parse("redis://localhost").is_ok());
        assert!(parse("redis://:pw@[::1]:6379/0").is_ok());
        let shown = format!("{:?}", parse("redis://u:hunter2@h:1").unwrap());
        assert!(!shown.contains("hunter2"), "{shown}");
        // A password with an unencoded '@', '/', '?', '#' and ':': all of it is the password.
        let c = parse("redis://u:p@s/s?w#o:rd@h:1/3").unwrap();
        assert_eq!(c.shown, "redis://***@h:1/3");
        assert_eq!(c.info.redis_settings().password(), Some("p@s/s?w#o:rd"));
        assert_eq!(c.info.redis_settings().username(), Some("u"));
        assert_eq!(c.info.redis_settings().db(), 3);
        assert_eq!(c.info.addr().to_string(), "h:1");
    }

    #[test]
    fn bad_urls_name_the_fault_and_hide_the_password() {
        for (url, fault) in [
            ("redis://", "no host"),
            ("redis://u:hunter2@h:port/0", "port"),
            ("redis://u:hunter2@h:0", "port"),
            ("redis://u:hunter2@h:6379/zero", "database"),
            ("http://u:hunter2@h:6379", "not a redis"),
        ] {
            let err = parse(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{url}");
            let shown = err.to_string();
            assert!(shown.contains(fault), "{url}: {shown}");
            assert!(!shown.contains("hunter2"), "{url}: {shown}");
        }
    }
}
