//! [`MemcachedConfig`]: the typed configuration of the memcached store, and the parser of
//! `memcached://host[:port][,host[:port]…][?max_connections=N]` that produces it.

use crate::error::{Error, ErrorKind, Result};
use crate::url::{after_hosts, authority, redact};

use super::NAME;

const SHAPE: &str = "memcached://host[:port][,host[:port]…][?max_connections=N]";
/// memcached's port.
const DEFAULT_PORT: u16 = 11211;
/// Connections per server when the URL does not say.
const DEFAULT_MAX_CONNECTIONS: usize = 8;

/// serde's default of `max_connections`.
#[cfg(feature = "serde")]
fn default_max_connections() -> usize {
    DEFAULT_MAX_CONNECTIONS
}

/// The typed configuration of the memcached store, equal in power to its URL (the table in the
/// module docs). Build it with [`MemcachedConfig::new`] and the setters, parse it with
/// [`MemcachedConfig::from_url`] or deserialize it (feature `serde`); then
/// [`MemcachedBackend::connect_config`](super::MemcachedBackend::connect_config).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct MemcachedConfig {
    /// The servers as `(host, port)`, in an order that decides where each lock lives (every
    /// client of a lock must list them alike).
    pub servers: Vec<(String, u16)>,
    /// The most connections open to one server at once (`?max_connections=N`, 1 to 1024;
    /// 8 by default).
    #[cfg_attr(feature = "serde", serde(default = "default_max_connections"))]
    pub max_connections: usize,
}

impl MemcachedConfig {
    /// The servers at these `(host, port)`, 8 connections each at most.
    pub fn new<H: Into<String>>(servers: impl IntoIterator<Item = (H, u16)>) -> Self {
        MemcachedConfig {
            servers: servers.into_iter().map(|(h, p)| (h.into(), p)).collect(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }

    /// Parses a `memcached://` URL.
    pub fn from_url(url: &str) -> Result<Self> {
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
        let servers = authority(url, NAME, SHAPE)?.servers(DEFAULT_PORT);
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
        let mut config = MemcachedConfig::new(servers);
        for (key, value) in parts.query {
            match key {
                "max_connections" => {
                    config.max_connections = value
                        .parse::<usize>()
                        .map_err(|_| invalid("max_connections must be a number 1-1024"))?;
                }
                _ => return Err(invalid("an unknown parameter (known: max_connections)")),
            }
        }
        config.check().map_err(|why| invalid(&why))?;
        Ok(config)
    }

    /// The most connections open to one server at once (1 to 1024).
    pub fn max_connections(mut self, max_connections: usize) -> Self {
        self.max_connections = max_connections;
        self
    }

    /// Each server's address as `host:port` (an IPv6 address in brackets).
    pub(super) fn addresses(&self) -> Vec<String> {
        self.servers
            .iter()
            .map(|(host, port)| {
                if host.contains(':') {
                    format!("[{host}]:{port}")
                } else {
                    format!("{host}:{port}")
                }
            })
            .collect()
    }

    /// The configuration as a URL: how messages show it.
    pub fn shown(&self) -> String {
        let query = if self.max_connections == DEFAULT_MAX_CONNECTIONS {
            String::new()
        } else {
            format!("?max_connections={}", self.max_connections)
        };
        format!("memcached://{}{query}", self.addresses().join(","))
    }

    /// Checks the settings; the error says what is wrong.
    pub(super) fn check(&self) -> std::result::Result<(), String> {
        if self.servers.is_empty() || self.servers.iter().any(|(host, _)| host.is_empty()) {
            return Err("no host".to_string());
        }
        if self.servers.iter().any(|(_, port)| *port == 0) {
            return Err("port 0 is no port".to_string());
        }
        if !(1..=1024).contains(&self.max_connections) {
            return Err("max_connections must be a number 1-1024".to_string());
        }
        let mut distinct = self.addresses();
        distinct.sort();
        distinct.dedup();
        if distinct.len() != self.servers.len() {
            return Err("a server is listed twice".to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<MemcachedConfig> {
        MemcachedConfig::from_url(url)
    }

    #[test]
    fn good_urls() {
        let c = parse("memcached://127.0.0.1:11211").unwrap();
        assert_eq!(c.addresses(), ["127.0.0.1:11211"]);
        assert_eq!(c.max_connections, DEFAULT_MAX_CONNECTIONS);
        let c = parse("memcached://a,b:11212,[::1]?max_connections=3").unwrap();
        assert_eq!(c.addresses(), ["a:11211", "b:11212", "[::1]:11211"]);
        // Every parameter is a field.
        let built =
            MemcachedConfig::new([("a", 11211), ("b", 11212), ("::1", 11211)]).max_connections(3);
        assert_eq!(c, built);
        assert_eq!(
            c.shown(),
            "memcached://a:11211,b:11212,[::1]:11211?max_connections=3"
        );
        assert!(parse("MEMCACHED://h/").is_ok());
    }

    #[test]
    fn settings_in_code_are_checked() {
        for (config, fault) in [
            (
                MemcachedConfig::new([("h", 1)]).max_connections(0),
                "max_connections",
            ),
            (MemcachedConfig::new([("h", 1), ("h", 1)]), "twice"),
            (MemcachedConfig::new(Vec::<(String, u16)>::new()), "no host"),
            (MemcachedConfig::new([("h", 0)]), "port"),
        ] {
            let why = config.check().err().unwrap_or_default();
            assert!(why.contains(fault), "{config:?}: {why}");
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn from_json() {
        let c: MemcachedConfig = serde_json::from_str(r#"{"servers": [["h", 11211]]}"#).unwrap();
        assert_eq!(c, MemcachedConfig::new([("h", 11211)]));
        let typo = r#"{"servers": [["h", 11211]], "max_conections": 2}"#;
        assert!(serde_json::from_str::<MemcachedConfig>(typo).is_err());
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
