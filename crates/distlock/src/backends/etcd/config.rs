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

/// Client certificate files for `etcds://`.
#[derive(Debug, Default)]
pub(super) struct Tls {
    pub(super) ca: Option<PathBuf>,
    pub(super) cert: Option<PathBuf>,
    pub(super) key: Option<PathBuf>,
}

pub(super) struct Config {
    /// `http://host:port` or `https://host:port`, one per server.
    pub(super) endpoints: Vec<String>,
    /// User and password (never shown).
    pub(super) user: Option<(String, String)>,
    pub(super) tls: Option<Tls>,
    /// Put before every lock's keys: the URL's path with a trailing `/`, or nothing.
    pub(super) prefix: String,
    /// The session lease's TTL.
    pub(super) ttl: Duration,
    /// The URL as errors and `Debug` show it.
    pub(super) redacted: String,
}

impl std::fmt::Debug for Config {
    // By hand: the password must never show.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("url", &self.redacted)
            .field("ttl", &self.ttl)
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
    let mut tls = Tls::default();
    for (key, value) in parts.query {
        match key {
            "ttl" => {
                let secs = value.strip_suffix('s').unwrap_or(value);
                ttl = secs
                    .parse::<u64>()
                    .ok()
                    .map(Duration::from_secs)
                    .filter(|t| *t >= MIN_TTL && *t <= Duration::from_secs(86_400))
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
                    "cacert" => tls.ca = Some(path),
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
    let files = tls.ca.is_some() || tls.cert.is_some() || tls.key.is_some();
    if files && !secure {
        return Err(invalid("cacert, cert and key need etcds:// (TLS)".into()));
    }
    if tls.cert.is_some() != tls.key.is_some() {
        return Err(invalid(
            "a client certificate needs both cert and key".into(),
        ));
    }
    let web = if secure { "https" } else { "http" };
    let endpoints = hosts
        .iter()
        .map(|h| format!("{web}://{}:{}", h.host, h.port.unwrap_or(DEFAULT_PORT)))
        .collect();
    Ok(Config {
        endpoints,
        user,
        tls: secure.then_some(tls),
        prefix,
        ttl,
        redacted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_prefix_ttl_and_user() {
        let c = parse("etcd://app:s%40cret@10.0.0.1,10.0.0.2:2390/locks/?ttl=5").unwrap();
        assert_eq!(
            c.endpoints,
            ["http://10.0.0.1:2379", "http://10.0.0.2:2390"]
        );
        assert_eq!(c.user, Some(("app".into(), "s@cret".into())));
        assert_eq!(c.prefix, "locks/");
        assert_eq!(c.ttl, Duration::from_secs(5));
        assert!(c.tls.is_none());
        assert!(!format!("{c:?}").contains("cret\""), "{c:?}");
        let plain = parse("etcd://127.0.0.1:2379").unwrap();
        assert_eq!(plain.prefix, "");
        assert_eq!(plain.ttl, DEFAULT_TTL);
        let tls = parse("etcds://h?cacert=/ca.pem&cert=/c.pem&key=/k.pem").unwrap();
        assert_eq!(tls.endpoints, ["https://h:2379"]);
        assert!(tls.tls.unwrap().key.is_some());
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
