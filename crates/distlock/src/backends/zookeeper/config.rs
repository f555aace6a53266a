//! `zk://[user:password@]host[:port][,host[:port]…][/chroot][?timeout=T]`: the servers, the
//! digest credentials, the path every lock lives under, and the session timeout.

use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::url::{after_hosts, authority, parse_duration, redact};

use super::NAME;

const SHAPE: &str =
    "zk://[user:password@]host[:port][,host[:port]…][/chroot][?timeout=10s] (timeout in s or ms)";
/// ZooKeeper's client port.
const DEFAULT_PORT: u16 = 2181;
/// The session timeout asked for when the URL gives none: a crashed holder's lock is free at
/// most about this long after its last contact with the ensemble.
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Shorter sessions expire on an ordinary scheduling hiccup (servers allow 2 ticks at least).
const MIN_TIMEOUT: Duration = Duration::from_millis(500);
const MAX_TIMEOUT: Duration = Duration::from_secs(3_600);

pub(super) struct Config {
    /// `host:port,host:port`: the client's connect string, without the chroot.
    pub(super) servers: String,
    /// For ZooKeeper's `digest` scheme (never shown).
    pub(super) user: Option<(String, String)>,
    /// Every lock's node lives under this path: `/chroot`, or empty for the root.
    pub(super) prefix: String,
    /// The session timeout asked for (the servers may bound it).
    pub(super) timeout: Duration,
    /// The URL as errors and `Debug` show it.
    pub(super) redacted: String,
}

impl std::fmt::Debug for Config {
    // By hand: the password must never show.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("url", &self.redacted)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

pub(super) fn parse(url: &str) -> Result<Config> {
    let redacted = redact(url);
    let invalid = |why: String| {
        Error::new(
            ErrorKind::InvalidUrl,
            format!("{redacted:?}: {why}; expected {SHAPE}"),
        )
        .with_backend(NAME)
    };
    let hosts = authority(url, NAME, SHAPE)?.hosts;
    let parts = after_hosts(url).map_err(|why| invalid(why.into()))?;
    let prefix = match parts.path.as_str() {
        "" => String::new(),
        path => {
            // Each segment must be a node name ZooKeeper takes as it is.
            if path
                .split('/')
                .any(|s| s.is_empty() || s == "." || s == ".." || super::nodes::escape(s) != s)
            {
                return Err(invalid(
                    "the chroot must be /name[/name…] of plain node names".into(),
                ));
            }
            if path == "zookeeper" || path.starts_with("zookeeper/") {
                return Err(invalid("/zookeeper is ZooKeeper's own".into()));
            }
            format!("/{path}")
        }
    };
    let mut timeout = DEFAULT_TIMEOUT;
    for (key, value) in parts.query {
        match key {
            "timeout" => {
                timeout = parse_duration(value)
                    .filter(|t| (MIN_TIMEOUT..=MAX_TIMEOUT).contains(t))
                    .ok_or_else(|| {
                        invalid("timeout must be from 500ms to 3600s (e.g. 10s, 4000ms)".into())
                    })?;
            }
            // Not quoted: an unknown parameter may be a secret misspelt.
            _ => return Err(invalid("an unknown parameter (known: timeout)".into())),
        }
    }
    let servers = hosts
        .iter()
        .map(|h| format!("{}:{}", h.host, h.port.unwrap_or(DEFAULT_PORT)))
        .collect::<Vec<_>>()
        .join(",");
    Ok(Config {
        servers,
        user: parts.user,
        prefix,
        timeout,
        redacted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_chroot_timeout_and_user() {
        let c = parse("zk://app:s%40cret@10.0.0.1,10.0.0.2:2182/services/locks?timeout=4000ms")
            .unwrap();
        assert_eq!(c.servers, "10.0.0.1:2181,10.0.0.2:2182");
        assert_eq!(c.user, Some(("app".into(), "s@cret".into())));
        assert_eq!(c.prefix, "/services/locks");
        assert_eq!(c.timeout, Duration::from_millis(4000));
        let plain = parse("zk://127.0.0.1").unwrap();
        assert_eq!(plain.prefix, "");
        assert_eq!(plain.timeout, DEFAULT_TIMEOUT);
        assert_eq!(parse("zk://h/?timeout=7").unwrap().timeout.as_secs(), 7);
        assert!(!format!("{c:?}").contains("cret"));
    }

    #[test]
    fn bad_urls_are_refused_without_showing_secrets() {
        for url in [
            "zk://u:hunter2@h?timeout=1ms",
            "zk://u:hunter2@h?timeout=soon",
            "zk://u:hunter2@h?password=x",
            "zk://u:hunter2@h/a/../b",
            "zk://u:hunter2@h/zookeeper",
            "zk://u:hunter2@h/a//b",
            "zk://u:hunter2@h:0",
            "zk://u:hunter2@/x",
        ] {
            let e = parse(url)
                .err()
                .unwrap_or_else(|| panic!("{url} was taken"));
            assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{url}");
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
    }
}
