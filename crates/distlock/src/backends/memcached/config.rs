//! `memcached://host[:port][,host[:port]…][?max_connections=N]` → the servers and the pool size.

use crate::error::{Error, ErrorKind, Result};
use crate::url::{after_hosts, authority, redact};

use super::NAME;

const SHAPE: &str = "memcached://host[:port][,host[:port]…][?max_connections=N]";
/// memcached's port.
const DEFAULT_PORT: u16 = 11211;
/// Connections per server when the URL does not say.
const DEFAULT_MAX_CONNECTIONS: usize = 8;

#[derive(Debug)]
pub(super) struct Config {
    /// `host:port` of each server, in the URL's order (which decides where each lock lives).
    pub(super) servers: Vec<String>,
    /// The most connections open to one server at once.
    pub(super) max_connections: usize,
    /// The URL as errors and `Debug` show it.
    pub(super) redacted: String,
}

pub(super) fn parse(url: &str) -> Result<Config> {
    let redacted = redact(url);
    let invalid = |why: &str| {
        Error::new(
            ErrorKind::InvalidUrl,
            format!("{redacted:?}: {why}; expected {SHAPE}"),
        )
        .with_backend(NAME)
    };
    if !url
        .get(..12)
        .is_some_and(|s| s.eq_ignore_ascii_case("memcached://"))
    {
        return Err(invalid("not a memcached:// URL"));
    }
    let hosts = authority(url, NAME, SHAPE)?.hosts;
    let parts = after_hosts(url).map_err(invalid)?;
    if parts.user.is_some() {
        return Err(invalid(
            "memcached's text protocol has no login (no user or password)",
        ));
    }
    if !parts.path.is_empty() {
        return Err(invalid(
            "memcached has no databases (nothing after the hosts)",
        ));
    }
    let mut max_connections = DEFAULT_MAX_CONNECTIONS;
    for (key, value) in parts.query {
        match key {
            "max_connections" => {
                max_connections = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=1024).contains(n))
                    .ok_or_else(|| invalid("max_connections must be a number 1-1024"))?;
            }
            _ => return Err(invalid("an unknown parameter (known: max_connections)")),
        }
    }
    let servers = hosts
        .iter()
        .map(|h| format!("{}:{}", h.host, h.port.unwrap_or(DEFAULT_PORT)))
        .collect::<Vec<_>>();
    let mut distinct = servers.clone();
    distinct.sort();
    distinct.dedup();
    if distinct.len() != servers.len() {
        return Err(invalid("a server is listed twice"));
    }
    Ok(Config {
        servers,
        max_connections,
        redacted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_urls() {
        let c = parse("memcached://127.0.0.1:11211").unwrap();
        assert_eq!(c.servers, ["127.0.0.1:11211"]);
        assert_eq!(c.max_connections, DEFAULT_MAX_CONNECTIONS);
        let c = parse("memcached://a,b:11212,[::1]?max_connections=3").unwrap();
        assert_eq!(c.servers, ["a:11211", "b:11212", "[::1]:11211"]);
        assert_eq!(c.max_connections, 3);
        assert!(parse("MEMCACHED://h/").is_ok());
    }

    #[test]
    fn bad_urls_are_typed() {
        for (url, fault) in [
            ("memcached://", "no host"),
            ("memcached://h:0", "port"),
            ("memcached://u:hunter2@h", "login"),
            ("memcached://h/db", "databases"),
            ("memcached://h?max_connections=0", "max_connections"),
            ("memcached://h?timeout=1", "unknown parameter"),
            ("memcached://h,h:11211", "twice"),
            ("redis://h", "not a memcached"),
        ] {
            let err = parse(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{url}");
            let shown = err.to_string();
            assert!(shown.contains(fault), "{url}: {shown}");
            assert!(!shown.contains("hunter2"), "{url}: {shown}");
        }
    }
}
