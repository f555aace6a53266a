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

/// Everything a `zk://` URL says, in code
/// ([`ZooKeeperBackend::connect_config`](super::ZooKeeperBackend::connect_config)): the servers,
/// the digest credentials, the chroot and the session timeout. `Debug` never shows the password.
///
/// ```
/// use std::time::Duration;
/// use distlock::backends::zookeeper::ZooKeeperConfig;
/// let config = ZooKeeperConfig::new(["10.0.0.1:2181", "10.0.0.2:2181"])
///     .chroot("/services/locks")
///     .timeout(Duration::from_secs(4))
///     .credentials("app", "secret");
/// assert_eq!(
///     config,
///     ZooKeeperConfig::from_url("zk://app:secret@10.0.0.1,10.0.0.2/services/locks?timeout=4s")
///         .unwrap()
/// );
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct ZooKeeperConfig {
    /// `host:port` of each server (the URL's hosts; the port defaults to 2181 there).
    pub servers: Vec<String>,
    /// The user of ZooKeeper's `digest` scheme (the URL's `user@`).
    pub user: Option<String>,
    /// The user's password (the URL's `user:password@`); never shown.
    pub password: Option<String>,
    /// The path every lock's node lives under (the URL's path): `""` for the root, or
    /// `/name[/name…]` of plain node names.
    #[cfg_attr(feature = "serde", serde(default))]
    pub chroot: String,
    /// The session timeout asked for (`?timeout=`, default 10 s; 500 ms to 3600 s): the servers
    /// bound it by their minimum and maximum. A lock whose lease is shorter is held under a
    /// session of its own.
    #[cfg_attr(
        feature = "serde",
        serde(default = "default_timeout", with = "crate::config_serde::duration")
    )]
    pub timeout: Duration,
}

#[cfg(feature = "serde")]
fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

crate::config_debug::debug_without_secrets!(ZooKeeperConfig {
    servers,
    user,
    password: secret,
    chroot,
    timeout,
});

impl ZooKeeperConfig {
    /// The ensemble at `servers` (`host:port`), with no credentials, at the root, with the
    /// default session timeout (10 s).
    pub fn new<I, S>(servers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ZooKeeperConfig {
            servers: servers.into_iter().map(Into::into).collect(),
            user: None,
            password: None,
            chroot: String::new(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// What `url` says (see the module docs for the URL).
    pub fn from_url(url: &str) -> Result<Self> {
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
        let chroot = match parts.path.as_str() {
            "" => String::new(),
            path => format!("/{path}"),
        };
        chroot_problem(&chroot).map_or(Ok(()), |why| Err(invalid(why.into())))?;
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
            .collect();
        let (user, password) = match parts.user {
            Some((user, password)) => (Some(user), Some(password).filter(|p| !p.is_empty())),
            None => (None, None),
        };
        Ok(ZooKeeperConfig {
            servers,
            user,
            password,
            chroot,
            timeout,
        })
    }

    /// Authenticates with ZooKeeper's `digest` scheme as `user` with `password`.
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self.password = Some(password.into());
        self
    }

    /// Puts every lock's node under `chroot` (`/name[/name…]`; a leading `/` is added when
    /// missing).
    pub fn chroot(mut self, chroot: impl Into<String>) -> Self {
        let chroot = chroot.into();
        self.chroot = if chroot.is_empty() || chroot.starts_with('/') {
            chroot
        } else {
            format!("/{chroot}")
        };
        self
    }

    /// The session timeout to ask for (500 ms to 3600 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The URL this configuration is, without the password: for errors and `Debug`.
    fn redacted(&self) -> String {
        let user = self
            .user
            .as_ref()
            .map(|u| format!("{u}:***@"))
            .unwrap_or_default();
        format!(
            "zk://{user}{}{}?timeout={}",
            self.servers.join(","),
            self.chroot,
            crate::types::show_duration(self.timeout)
        )
    }

    /// Checks what the URL's parser checks (for a configuration built in code too).
    pub(super) fn check(self, redacted: Option<String>) -> Result<Config> {
        let shown = redacted.unwrap_or_else(|| self.redacted());
        let invalid = |why: &str| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("ZooKeeper configuration {shown}: {why}"),
            )
            .with_backend(NAME)
        };
        if self.servers.is_empty() {
            return Err(invalid("no server (give host:port of at least one)"));
        }
        if let Some(bad) = self
            .servers
            .iter()
            .find(|s| s.is_empty() || s.contains('/') || s.contains(','))
        {
            return Err(invalid(&format!("server {bad:?} is not host:port")));
        }
        if self.password.is_some() && self.user.is_none() {
            return Err(invalid("a password needs a user"));
        }
        if let Some(why) = chroot_problem(&self.chroot) {
            return Err(invalid(why));
        }
        if !(MIN_TIMEOUT..=MAX_TIMEOUT).contains(&self.timeout) {
            return Err(invalid("timeout must be from 500ms to 3600s"));
        }
        Ok(Config {
            servers: self.servers.join(","),
            user: self
                .user
                .map(|user| (user, self.password.unwrap_or_default())),
            prefix: self.chroot,
            timeout: self.timeout,
            redacted: shown,
        })
    }
}

/// Why `chroot` is no chroot distlock takes, if it is not: `""`, or `/name[/name…]` of plain
/// node names, not ZooKeeper's own.
fn chroot_problem(chroot: &str) -> Option<&'static str> {
    let Some(path) = chroot.strip_prefix('/') else {
        return (!chroot.is_empty()).then_some("the chroot must start with /");
    };
    // Each segment must be a node name ZooKeeper takes as it is.
    if path
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == ".." || super::nodes::escape(s) != s)
    {
        return Some("the chroot must be /name[/name…] of plain node names");
    }
    if path == "zookeeper" || path.starts_with("zookeeper/") {
        return Some("/zookeeper is ZooKeeper's own");
    }
    None
}

/// A checked configuration, as the backend keeps it.
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
    ZooKeeperConfig::from_url(url)?.check(Some(redact(url)))
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

    /// Every URL parameter has its field: the URL and the configuration built in code are
    /// equal.
    #[test]
    fn every_url_parameter_is_a_field() {
        let url = "zk://app:s%40cret@10.0.0.1,10.0.0.2:2182/services/locks?timeout=4000ms";
        let built = ZooKeeperConfig::new(["10.0.0.1:2181", "10.0.0.2:2182"])
            .credentials("app", "s@cret")
            .chroot("services/locks")
            .timeout(Duration::from_secs(4));
        assert_eq!(ZooKeeperConfig::from_url(url).unwrap(), built);
        assert!(!format!("{built:?}").contains("cret"), "{built:?}");
        let checked = built.check(None).unwrap();
        assert_eq!(checked.servers, "10.0.0.1:2181,10.0.0.2:2182");
        assert_eq!(checked.prefix, "/services/locks");
        assert!(!checked.redacted.contains("cret"), "{}", checked.redacted);
        assert_eq!(
            ZooKeeperConfig::from_url("zk://127.0.0.1").unwrap(),
            ZooKeeperConfig::new(["127.0.0.1:2181"])
        );
    }

    #[test]
    fn a_config_built_in_code_is_checked_as_a_url_is() {
        for (config, says) in [
            (ZooKeeperConfig::new(Vec::<String>::new()), "no server"),
            (ZooKeeperConfig::new(["h:2181/x"]), "not host:port"),
            (
                ZooKeeperConfig::new(["h:2181"]).chroot("/a/../b"),
                "plain node names",
            ),
            (
                ZooKeeperConfig::new(["h:2181"]).chroot("/zookeeper"),
                "chroot",
            ),
            (
                ZooKeeperConfig::new(["h:2181"]).timeout(Duration::from_millis(1)),
                "timeout",
            ),
        ] {
            let e = config.check(None).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn from_json() {
        let json = r#"{"servers": ["10.0.0.1:2181"], "user": "app", "password": "pw",
            "chroot": "/locks", "timeout": "4s"}"#;
        let config: ZooKeeperConfig = serde_json::from_str(json).unwrap();
        assert_eq!(
            config,
            ZooKeeperConfig::new(["10.0.0.1:2181"])
                .credentials("app", "pw")
                .chroot("/locks")
                .timeout(Duration::from_secs(4))
        );
        let least: ZooKeeperConfig = serde_json::from_str(r#"{"servers": ["h:2181"]}"#).unwrap();
        assert_eq!(least, ZooKeeperConfig::new(["h:2181"]));
        assert!(
            serde_json::from_str::<ZooKeeperConfig>(r#"{"servers": [], "chroto": "/x"}"#).is_err()
        );
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
