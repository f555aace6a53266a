//! `etcd://[user:password@]host[:port][,host[:port]…][/prefix][?ttl=S&cacert=F&cert=F&key=F]`
//! (`etcds://` for TLS): the endpoints, the credentials, the key prefix and the session TTL.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::url::{after_hosts, authority, percent_decode, redact};

use super::NAME;

const SHAPE: &str =
    "etcd://[user:password@]host[:port][,host[:port]…][/prefix][?ttl=SECONDS] (etcds:// for TLS)";
/// etcd's client port.
const DEFAULT_PORT: u16 = 2379;
/// The session lease's TTL when the URL gives none: a crashed holder's lock is free at most
/// this long after its last keep-alive.
pub(super) const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// etcd refuses shorter leases (its minimum is about 1.5 election timeouts).
const MIN_TTL: Duration = Duration::from_secs(2);
const MAX_TTL: Duration = Duration::from_secs(86_400);

/// Client certificate files for TLS (`etcds://`): each optional (no `ca_cert`: the system's
/// roots).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(deny_unknown_fields, default)
)]
pub struct EtcdTls {
    /// The CA certificate (PEM) the servers' certificates are checked against (`?cacert=`).
    pub ca_cert: Option<PathBuf>,
    /// The client certificate (PEM), with `key` (`?cert=`).
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM), with `cert` (`?key=`).
    pub key: Option<PathBuf>,
}

impl EtcdTls {
    /// TLS checked against the system's roots, with no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Checks the servers' certificates against the CA certificate at `path` (PEM).
    pub fn ca_cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_cert = Some(path.into());
        self
    }

    /// Presents the client certificate at `cert` with its private key at `key` (PEM).
    pub fn identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.cert = Some(cert.into());
        self.key = Some(key.into());
        self
    }
}

/// Everything an `etcd://` URL says, in code ([`EtcdBackend::connect_config`](super::EtcdBackend::connect_config)):
/// the endpoints, the credentials, TLS, the key prefix and the session TTL. `Debug` never shows
/// the password.
///
/// ```
/// use std::time::Duration;
/// use distlock::backends::etcd::EtcdConfig;
/// let config = EtcdConfig::new(["10.0.0.1:2379", "10.0.0.2:2379"])
///     .prefix("locks/")
///     .ttl(Duration::from_secs(5))
///     .credentials("app", "secret");
/// assert_eq!(config, EtcdConfig::from_url("etcd://app:secret@10.0.0.1,10.0.0.2/locks?ttl=5").unwrap());
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct EtcdConfig {
    /// `host:port` of each member (the URL's hosts; the port defaults to 2379 there).
    pub endpoints: Vec<String>,
    /// The user (the URL's `user@`).
    pub user: Option<String>,
    /// The user's password (the URL's `user:password@`); never shown.
    pub password: Option<String>,
    /// TLS (`etcds://`), with its certificate files (`?cacert=&cert=&key=`); `None`: plain
    /// HTTP/2.
    pub tls: Option<EtcdTls>,
    /// Put before every lock's keys (the URL's path with a `/` after it): `""` or ending in `/`.
    #[cfg_attr(feature = "serde", serde(default))]
    pub prefix: String,
    /// The client session lease's TTL (`?ttl=`, default 10 s): whole seconds, 2 s to 24 h. A
    /// lock whose lease is shorter is held under an etcd lease of its own.
    #[cfg_attr(
        feature = "serde",
        serde(default = "default_ttl", with = "crate::config_serde::duration")
    )]
    pub ttl: Duration,
}

#[cfg(feature = "serde")]
fn default_ttl() -> Duration {
    DEFAULT_TTL
}

crate::config_debug::debug_without_secrets!(EtcdConfig {
    endpoints,
    user,
    password: secret,
    tls,
    prefix,
    ttl,
});

impl EtcdConfig {
    /// The members at `endpoints` (`host:port`), with no credentials, no TLS, no prefix and the
    /// default TTL (10 s).
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            user: None,
            password: None,
            tls: None,
            prefix: String::new(),
            ttl: DEFAULT_TTL,
        }
    }

    /// What `url` says (see the module docs for the URL).
    pub fn from_url(url: &str) -> Result<Self> {
        parse(url).map(|c| c.public)
    }

    /// Authenticates as `user` with `password`.
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self.password = Some(password.into());
        self
    }

    /// Speaks TLS, as `tls` says.
    pub fn tls(mut self, tls: EtcdTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Puts every lock's keys under `prefix` (a `/` is added when it has none at its end).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        self.prefix = if prefix.is_empty() || prefix.ends_with('/') {
            prefix
        } else {
            format!("{prefix}/")
        };
        self
    }

    /// The session lease's TTL (whole seconds, 2 s to 24 h).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The URL this configuration is, without the password: for errors and `Debug`.
    fn redacted(&self) -> String {
        let scheme = if self.tls.is_some() { "etcds" } else { "etcd" };
        let user = self
            .user
            .as_ref()
            .map(|u| format!("{u}:***@"))
            .unwrap_or_default();
        let prefix = self.prefix.trim_end_matches('/');
        let path = if prefix.is_empty() {
            String::new()
        } else {
            format!("/{prefix}")
        };
        format!(
            "{scheme}://{user}{}{path}?ttl={}",
            self.endpoints.join(","),
            self.ttl.as_secs()
        )
    }

    /// Checks what a URL's parser checks, for a configuration built in code.
    pub(super) fn check(mut self) -> Result<Config> {
        // etcd_client's own form, `http://host:port` (`https://` with TLS), reads as host:port.
        let web = if self.tls.is_some() {
            "https://"
        } else {
            "http://"
        };
        for endpoint in &mut self.endpoints {
            if let Some(bare) = endpoint.strip_prefix(web) {
                *endpoint = bare.trim_end_matches('/').to_string();
            }
        }
        let redacted = self.redacted();
        let invalid = |why: &str| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("etcd configuration {redacted}: {why}"),
            )
            .with_backend(NAME)
        };
        if self.endpoints.is_empty() {
            return Err(invalid(
                "no endpoint (give host:port of at least one member)",
            ));
        }
        if let Some(bad) = self
            .endpoints
            .iter()
            .find(|e| e.is_empty() || e.contains("://") || e.contains('/'))
        {
            return Err(invalid(&format!(
                "endpoint {bad:?} is not host:port (or {web}host:port)"
            )));
        }
        if self.password.is_some() && self.user.is_none() {
            return Err(invalid("a password needs a user"));
        }
        if self.ttl < MIN_TTL || self.ttl > MAX_TTL || self.ttl.subsec_nanos() != 0 {
            return Err(invalid(
                "ttl must be whole seconds from 2s to 86400s (etcd leases count seconds)",
            ));
        }
        if !self.prefix.is_empty() && !self.prefix.ends_with('/') {
            return Err(invalid(
                "the prefix must be empty or end with '/' (EtcdConfig::prefix adds it)",
            ));
        }
        if let Some(tls) = &self.tls
            && tls.cert.is_some() != tls.key.is_some()
        {
            return Err(invalid("a client certificate needs both cert and key"));
        }
        Ok(Config {
            public: self,
            redacted,
        })
    }
}

/// A checked configuration, as the backend keeps it.
pub(super) struct Config {
    pub(super) public: EtcdConfig,
    /// The configuration as errors and `Debug` show it.
    pub(super) redacted: String,
}

impl Config {
    /// `http://host:port` or `https://host:port`, one per member.
    pub(super) fn urls(&self) -> Vec<String> {
        let web = if self.public.tls.is_some() {
            "https"
        } else {
            "http"
        };
        self.public
            .endpoints
            .iter()
            .map(|e| format!("{web}://{e}"))
            .collect()
    }
}

impl std::ops::Deref for Config {
    type Target = EtcdConfig;

    fn deref(&self) -> &EtcdConfig {
        &self.public
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("url", &self.redacted)
            .field("ttl", &self.public.ttl)
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
    let secure = url
        .split_once("://")
        .is_some_and(|(scheme, _)| scheme.eq_ignore_ascii_case("etcds"));
    let hosts = authority(url, NAME, SHAPE)?.hosts;
    let parts = after_hosts(url).map_err(|why| invalid(why.into()))?;
    let user = parts.user;
    let prefix = match parts.path.as_str() {
        "" => String::new(),
        p => format!("{p}/"),
    };
    let mut ttl = DEFAULT_TTL;
    let mut tls = EtcdTls::default();
    for (key, value) in parts.query {
        match key {
            "ttl" => {
                let secs = value.strip_suffix('s').unwrap_or(value);
                ttl = secs
                    .parse::<u64>()
                    .ok()
                    .map(Duration::from_secs)
                    .filter(|t| *t >= MIN_TTL && *t <= MAX_TTL)
                    .ok_or_else(|| {
                        invalid(
                            "ttl must be whole seconds from 2 to 86400 (etcd leases count seconds)"
                                .into(),
                        )
                    })?;
            }
            "cacert" | "cert" | "key" => {
                let path = percent_decode(value)
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from)
                    .ok_or_else(|| invalid(format!("{key} needs a file path")))?;
                match key {
                    "cacert" => tls.ca_cert = Some(path),
                    "cert" => tls.cert = Some(path),
                    _ => tls.key = Some(path),
                }
            }
            // Not quoted: an unknown parameter may be a secret misspelt.
            _ => {
                return Err(invalid(
                    "an unknown parameter (known: ttl, cacert, cert, key)".into(),
                ));
            }
        }
    }
    let files = tls.ca_cert.is_some() || tls.cert.is_some() || tls.key.is_some();
    if files && !secure {
        return Err(invalid("cacert, cert and key need etcds:// (TLS)".into()));
    }
    if tls.cert.is_some() != tls.key.is_some() {
        return Err(invalid(
            "a client certificate needs both cert and key".into(),
        ));
    }
    let endpoints = hosts
        .iter()
        .map(|h| format!("{}:{}", h.host, h.port.unwrap_or(DEFAULT_PORT)))
        .collect();
    let (user, password) = match user {
        Some((user, password)) => (Some(user), Some(password).filter(|p| !p.is_empty())),
        None => (None, None),
    };
    Ok(Config {
        public: EtcdConfig {
            endpoints,
            user,
            password,
            tls: secure.then_some(tls),
            prefix,
            ttl,
        },
        redacted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_written_as_etcd_client_writes_them() {
        let plain = EtcdConfig::new(["http://10.0.0.1:2379/", "10.0.0.2:2379"])
            .check()
            .unwrap();
        assert_eq!(
            plain.urls(),
            ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]
        );
        let tls = EtcdConfig::new(["https://10.0.0.1:2379"])
            .tls(EtcdTls::new())
            .check()
            .unwrap();
        assert_eq!(tls.urls(), ["https://10.0.0.1:2379"]);
        // https without TLS configured says what it takes.
        let e = EtcdConfig::new(["https://10.0.0.1:2379"])
            .check()
            .unwrap_err();
        assert!(e.to_string().contains("http://host:port"), "{e}");
    }

    #[test]
    fn endpoints_prefix_ttl_and_user() {
        let c = parse("etcd://app:s%40cret@10.0.0.1,10.0.0.2:2390/locks/?ttl=5").unwrap();
        assert_eq!(c.urls(), ["http://10.0.0.1:2379", "http://10.0.0.2:2390"]);
        assert_eq!(c.user.as_deref(), Some("app"));
        assert_eq!(c.password.as_deref(), Some("s@cret"));
        assert_eq!(c.prefix, "locks/");
        assert_eq!(c.ttl, Duration::from_secs(5));
        assert!(c.tls.is_none());
        assert!(!format!("{c:?}").contains("cret"), "{c:?}");
        assert!(
            !format!("{:?}", c.public).contains("cret"),
            "{:?}",
            c.public
        );
        let plain = parse("etcd://127.0.0.1:2379").unwrap();
        assert_eq!(plain.prefix, "");
        assert_eq!(plain.ttl, DEFAULT_TTL);
        let tls = parse("etcds://h?cacert=/ca.pem&cert=/c.pem&key=/k.pem").unwrap();
        assert_eq!(tls.urls(), ["https://h:2379"]);
        assert!(tls.tls.as_ref().unwrap().key.is_some());
    }

    /// Every URL parameter has its field: the URL and the configuration built in code are
    /// equal, and checking the built one accepts it.
    #[test]
    fn every_url_parameter_is_a_field() {
        let url = "etcds://app:s%40cret@10.0.0.1,10.0.0.2:2390/locks?ttl=5&cacert=/ca.pem&cert=/c.pem&key=/k.pem";
        let built = EtcdConfig::new(["10.0.0.1:2379", "10.0.0.2:2390"])
            .credentials("app", "s@cret")
            .prefix("locks")
            .ttl(Duration::from_secs(5))
            .tls(
                EtcdTls::new()
                    .ca_cert("/ca.pem")
                    .identity("/c.pem", "/k.pem"),
            );
        assert_eq!(EtcdConfig::from_url(url).unwrap(), built);
        let checked = built.clone().check().unwrap();
        assert_eq!(
            checked.urls(),
            ["https://10.0.0.1:2379", "https://10.0.0.2:2390"]
        );
        assert!(!checked.redacted.contains("cret"), "{}", checked.redacted);
        assert_eq!(
            EtcdConfig::from_url("etcd://127.0.0.1").unwrap(),
            EtcdConfig::new(["127.0.0.1:2379"])
        );
        assert_eq!(
            EtcdConfig::from_url("etcds://h").unwrap(),
            EtcdConfig::new(["h:2379"]).tls(EtcdTls::new())
        );
    }

    #[test]
    fn a_config_built_in_code_is_checked_as_a_url_is() {
        for (config, says) in [
            (EtcdConfig::new(Vec::<String>::new()), "no endpoint"),
            (EtcdConfig::new(["grpc://h:2379"]), "not host:port"),
            (
                EtcdConfig::new(["h:2379"]).ttl(Duration::from_secs(1)),
                "ttl",
            ),
            (
                EtcdConfig::new(["h:2379"]).ttl(Duration::from_millis(2500)),
                "ttl",
            ),
            (
                EtcdConfig::new(["h:2379"]).tls(EtcdTls {
                    cert: Some("/c".into()),
                    ..EtcdTls::new()
                }),
                "both cert and key",
            ),
        ] {
            let e = config.check().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
        let mut nobody = EtcdConfig::new(["h:2379"]).credentials("u", "hunter2");
        nobody.user = None;
        let e = nobody.check().unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[cfg(feature = "serde")]
    #[test]
    fn from_json() {
        let json = r#"{"endpoints": ["10.0.0.1:2379"], "user": "app", "password": "pw",
            "tls": {"ca_cert": "/ca.pem"}, "prefix": "locks/", "ttl": "5s"}"#;
        let config: EtcdConfig = serde_json::from_str(json).unwrap();
        assert_eq!(
            config,
            EtcdConfig::new(["10.0.0.1:2379"])
                .credentials("app", "pw")
                .tls(EtcdTls::new().ca_cert("/ca.pem"))
                .prefix("locks/")
                .ttl(Duration::from_secs(5))
        );
        let least: EtcdConfig = serde_json::from_str(r#"{"endpoints": ["h:2379"]}"#).unwrap();
        assert_eq!(least, EtcdConfig::new(["h:2379"]));
        let typo = serde_json::from_str::<EtcdConfig>(r#"{"endpoints": [], "tll": 5}"#);
        assert!(typo.is_err());
    }

    #[test]
    fn bad_urls_are_refused_without_the_password() {
        for url in [
            "etcd://u:hunter2@h?ttl=1",
            "etcd://u:hunter2@h?ttl=x",
            "etcd://u:hunter2@h?passwd=hunter2",
            "etcd://u:hunter2@h?cacert=/x",
            "etcds://u:hunter2@h?cert=/x",
            "etcd://u:hunter2@h:0",
            "etcd://:hunter2@h",
            "etcd://u:hunter2@h#frag",
        ] {
            let e = parse(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{url}");
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
    }
}
