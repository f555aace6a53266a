//! `redis://[user:password@]host:port[/db]`, `rediss://…` and
//! `redis-sentinel://[user:password@]host:port[,host:port…]/MASTER_NAME[?db=N&sentinel_password=P]`
//! → connection settings.
//!
//! The URL is checked here so a typo gets a precise [`ErrorKind::InvalidUrl`] naming the part at
//! fault; redis-rs then builds its connection info from the same string. Every message shows the
//! URL through [`crate::redact`], so a password never reaches an error, a log line or `Debug`.

use super::keys::check_prefix;
use super::replicas::{ReplicaAck, WAIT_REPLICAS, WAIT_TIMEOUT};
use crate::error::{Error, ErrorKind, Result};
use crate::url::{
    AroundHosts, around_hosts, authority, for_driver, percent_decode, redact, userinfo_end,
};

/// What `connect` needs from the URL.
pub(super) struct RedisConfig {
    /// The URL with its password masked: the only form ever shown.
    pub(super) shown: String,
    /// `rediss://`: TLS (rustls).
    pub(super) tls: bool,
    /// redis-rs's settings, password included.
    pub(super) info: redis::ConnectionInfo,
    /// Put before every key and channel (`?prefix=`), or empty.
    pub(super) prefix: String,
    /// Replicas that must acknowledge each take (`?wait_replicas=N&wait_timeout=D`), if any.
    pub(super) ack: Option<ReplicaAck>,
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

const EXPECTED: &str = "redis://[user:password@]host:port[/db][?prefix=app1:\
                        &wait_replicas=N&wait_timeout=100ms] or rediss://…";

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
    let (driver_url, ours) = take_params(url).map_err(|why| invalid(url, why))?;
    let info =
        redis::IntoConnectionInfo::into_connection_info(for_driver(&driver_url)).map_err(|e| {
            invalid(
                url,
                format!("rejected by the Redis client ({:?})", e.kind()),
            )
        })?;
    Ok(RedisConfig {
        shown: redact(url),
        tls,
        info,
        prefix: ours.prefix,
        ack: ours.ack,
    })
}

/// The parameters of a `redis://` URL that are distlock's, not redis-rs'.
#[derive(Default)]
struct OurParams {
    /// `prefix=` (checked), or empty.
    prefix: String,
    /// `wait_replicas=` and `wait_timeout=`.
    ack: Option<ReplicaAck>,
}

/// `url` without distlock's own parameters (`prefix`, `wait_replicas`, `wait_timeout`), and
/// their values, checked. The query starts at the first `?` after the user-info, which may hold
/// one.
fn take_params(url: &str) -> std::result::Result<(String, OurParams), String> {
    let hosts_start = url.find("://").map_or(0, |i| i + 3);
    let hosts_start = hosts_start + userinfo_end(&url[hosts_start..]).map_or(0, |at| at + 1);
    let Some(query_start) = url[hosts_start..].find('?').map(|i| hosts_start + i) else {
        return Ok((url.to_string(), OurParams::default()));
    };
    let (query, fragment) = match url[query_start + 1..].split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (&url[query_start + 1..], None),
    };
    let mut ours = OurParams::default();
    let (mut wait_replicas, mut wait_timeout) = (None, None);
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("prefix", value)) => {
                check_prefix(value)?;
                ours.prefix = value.to_string();
            }
            Some((WAIT_REPLICAS, value)) => wait_replicas = Some(value),
            Some((WAIT_TIMEOUT, value)) => wait_timeout = Some(value),
            _ => kept.push(pair),
        }
    }
    ours.ack = ReplicaAck::from_params(wait_replicas, wait_timeout)?;
    let mut out = url[..query_start].to_string();
    if !kept.is_empty() {
        out.push('?');
        out.push_str(&kept.join("&"));
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    Ok((out, ours))
}

/// The scheme of Redis behind Sentinel.
pub(super) const SENTINEL_SCHEME: &str = "redis-sentinel://";

/// Whether `url` is a `redis-sentinel://` URL (schemes are case-insensitive).
pub(super) fn is_sentinel(url: &str) -> bool {
    url.get(..SENTINEL_SCHEME.len())
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case(SENTINEL_SCHEME))
}

const SENTINEL_EXPECTED: &str = "redis-sentinel://[user:password@]host:port[,host:port…]/\
                                 MASTER_NAME[?db=N&prefix=app1:&wait_replicas=N&wait_timeout=100ms\
                                 &sentinel_user=U&sentinel_password=P]";

/// The parameters of a `redis-sentinel://` URL that log in to the Sentinels themselves (their
/// `requirepass`, or an ACL user of theirs); the URL's user-info is the data nodes'.
const SENTINEL_USER: &str = "sentinel_user";
const SENTINEL_PASSWORD: &str = "sentinel_password";

/// Sentinel's own port, for a host given without one.
const SENTINEL_PORT: u16 = 26379;

/// What `connect` needs from a `redis-sentinel://` URL.
pub(super) struct SentinelConfig {
    /// The URL with its password masked: the only form ever shown.
    pub(super) shown: String,
    /// The Sentinels, in the URL's order.
    pub(super) sentinels: Vec<(String, u16)>,
    /// The name the Sentinels monitor the master under.
    pub(super) master_name: String,
    /// The data nodes' user, password and database; the address is a placeholder, replaced by
    /// the master's.
    pub(super) node: redis::ConnectionInfo,
    /// Put before every key and channel (`?prefix=`), or empty.
    pub(super) prefix: String,
    /// Replicas that must acknowledge each take (`?wait_replicas=N&wait_timeout=D`), if any.
    pub(super) ack: Option<ReplicaAck>,
    /// How to log in to the Sentinels (`?sentinel_user=U&sentinel_password=P`, %-decoded):
    /// the password, and the user if any. `None`: they are asked without logging in.
    pub(super) sentinel_login: Option<SentinelLogin>,
}

/// The Sentinels' own user and password (not the data nodes').
#[derive(Clone)]
pub(crate) struct SentinelLogin {
    pub(crate) user: Option<String>,
    pub(crate) password: String,
}

impl std::fmt::Debug for SentinelLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("SentinelLogin")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for SentinelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not `node`: it holds the password.
        f.debug_struct("SentinelConfig")
            .field("url", &self.shown)
            .field("sentinels", &self.sentinels)
            .field("master_name", &self.master_name)
            .finish()
    }
}

/// Checks a `redis-sentinel://` URL. The user and password are the data nodes' (the master's
/// and replicas'); the Sentinels are asked with `sentinel_user` and `sentinel_password` when
/// the URL gives them (a Sentinel's `requirepass` is its own: Redis's docs set it apart from the
/// nodes' `requirepass`, which the Sentinels reach with `sentinel auth-pass`).
pub(super) fn parse_sentinel(url: &str) -> Result<SentinelConfig> {
    let bad = |why: &str| {
        Error::new(
            ErrorKind::InvalidUrl,
            format!("{:?}: {why}; expected {SENTINEL_EXPECTED}", redact(url)),
        )
        .with_backend("redis")
    };
    if !is_sentinel(url) {
        return Err(bad("not a redis-sentinel:// URL"));
    }
    let sentinels = authority(url, "redis", SENTINEL_EXPECTED)?.servers(SENTINEL_PORT);
    let AroundHosts {
        userinfo,
        path,
        query,
    } = around_hosts(url).map_err(bad)?;
    let master_name = percent_decode(path.trim_start_matches('/'))
        .ok_or_else(|| bad("a bad %-escape in the master's name"))?;
    if master_name.is_empty() {
        return Err(bad(
            "no master name after the hosts (the name the Sentinels monitor it under)",
        ));
    }
    if master_name.contains(['/', ' ']) {
        return Err(bad(
            "the master's name (after the hosts) has a '/' or a space; put the database in ?db=N",
        ));
    }
    let mut db = 0u32;
    let mut prefix = String::new();
    let (mut wait_replicas, mut wait_timeout) = (None, None);
    let (mut sentinel_user, mut sentinel_password) = (None, None);
    for pair in query {
        match pair {
            ("prefix", value) => {
                check_prefix(value).map_err(bad)?;
                prefix = value.to_string();
            }
            (SENTINEL_USER, value) => {
                sentinel_user = Some(
                    percent_decode(value).ok_or_else(|| bad("a bad %-escape in sentinel_user"))?,
                );
            }
            (SENTINEL_PASSWORD, value) => {
                sentinel_password = Some(
                    percent_decode(value)
                        .ok_or_else(|| bad("a bad %-escape in sentinel_password"))?,
                );
            }
            ("db", value) => {
                db = value
                    .parse()
                    .map_err(|_| bad("db (the database) is not a number"))?;
            }
            (WAIT_REPLICAS, value) => wait_replicas = Some(value),
            (WAIT_TIMEOUT, value) => wait_timeout = Some(value),
            _ => {
                return Err(bad(
                    "an unknown parameter (redis-sentinel:// takes db, prefix, wait_replicas, \
                     wait_timeout, sentinel_user and sentinel_password)",
                ));
            }
        }
    }
    let sentinel_login = match (sentinel_user, sentinel_password) {
        (None, None) => None,
        (_, Some(password)) if password.is_empty() => {
            return Err(bad(
                "sentinel_password is empty (leave it out for Sentinels without a password)",
            ));
        }
        (user, Some(password)) => Some(SentinelLogin { user, password }),
        (Some(_), None) => {
            return Err(bad(
                "sentinel_user without sentinel_password (a Sentinel's user logs in with a password)",
            ));
        }
    };
    let ack = ReplicaAck::from_params(wait_replicas, wait_timeout).map_err(|why| bad(&why))?;
    // redis-rs reads the user-info and database as it does for redis://; the address is a
    // placeholder, replaced by each master's.
    let node_url = match userinfo {
        Some(userinfo) => format!("redis://{userinfo}@127.0.0.1:6379/{db}"),
        None => format!("redis://127.0.0.1:6379/{db}"),
    };
    let node = redis::IntoConnectionInfo::into_connection_info(for_driver(&node_url))
        .map_err(|e| bad(&format!("rejected by the Redis client ({:?})", e.kind())))?;
    Ok(SentinelConfig {
        shown: redact(url),
        sentinels,
        master_name,
        node,
        prefix,
        ack,
        sentinel_login,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls() {
        let c =
            parse_sentinel("redis-sentinel://127.0.0.1:6410,127.0.0.1:6411,h/distlock").unwrap();
        assert_eq!(
            c.sentinels,
            vec![
                ("127.0.0.1".to_string(), 6410),
                ("127.0.0.1".to_string(), 6411),
                ("h".to_string(), 26379),
            ]
        );
        assert_eq!(c.master_name, "distlock");
        assert_eq!(c.node.redis_settings().db(), 0);
        assert_eq!(c.node.redis_settings().password(), None);
        let c = parse_sentinel("REDIS-SENTINEL://app:p@s/s?w#rd@[::1]:26379/my%20master?db=3");
        assert_eq!(
            c.unwrap_err().kind(),
            ErrorKind::InvalidUrl,
            "a space in the name"
        );
        let c =
            parse_sentinel("redis-sentinel://app:p@s/s?w#rd@[::1]:26379/mymaster?db=3").unwrap();
        assert_eq!(c.sentinels, vec![("::1".to_string(), 26379)]);
        assert_eq!(c.node.redis_settings().db(), 3);
        assert_eq!(c.node.redis_settings().username(), Some("app"));
        assert_eq!(c.node.redis_settings().password(), Some("p@s/s?w#rd"));
        assert_eq!(c.shown, "redis-sentinel://***@[::1]:26379/mymaster?db=3");
        assert_eq!(c.prefix, "");
        let c = parse_sentinel("redis-sentinel://h:1/m?prefix=app1:&db=2").unwrap();
        assert_eq!(
            (c.prefix.as_str(), c.node.redis_settings().db()),
            ("app1:", 2)
        );
        let c = parse_sentinel("redis-sentinel://:hunter2@h:1/m").unwrap();
        assert_eq!(c.node.redis_settings().password(), Some("hunter2"));
        assert!(!format!("{c:?}").contains("hunter2"));
        assert!(c.sentinel_login.is_none());
    }

    #[test]
    fn the_sentinels_own_login() {
        let url = "redis-sentinel://:nodes@h:1/m?sentinel_password=s%26cr%3Dt&db=2";
        let c = parse_sentinel(url).unwrap();
        let login = c.sentinel_login.clone().unwrap();
        assert_eq!((login.user, login.password.as_str()), (None, "s&cr=t"));
        assert_eq!(c.node.redis_settings().password(), Some("nodes"));
        assert_eq!(c.node.redis_settings().db(), 2);
        assert_eq!(
            c.shown,
            "redis-sentinel://:***@h:1/m?sentinel_password=***&db=2"
        );
        assert!(!format!("{c:?}").contains("s&cr=t"), "{c:?}");
        let c = parse_sentinel("redis-sentinel://h:1/m?sentinel_user=watch&sentinel_password=pw");
        let login = c.unwrap().sentinel_login.unwrap();
        assert_eq!(login.user.as_deref(), Some("watch"));
        assert!(!format!("{login:?}").contains("pw\""));
        for (url, fault) in [
            (
                "redis-sentinel://h:1/m?sentinel_user=watch",
                "without sentinel_password",
            ),
            ("redis-sentinel://h:1/m?sentinel_password=", "empty"),
            (
                "redis-sentinel://h:1/m?sentinel_password=hunter2%zz",
                "%-escape",
            ),
        ] {
            let err = parse_sentinel(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{url}");
            assert!(err.to_string().contains(fault), "{url}: {err}");
            assert!(!err.to_string().contains("hunter2"), "{url}: {err}");
        }
    }

    #[test]
    fn bad_sentinel_urls_name_the_fault_and_hide_the_password() {
        for (url, fault) in [
            ("redis-sentinel://u:hunter2@h:1", "no master name"),
            ("redis-sentinel://u:hunter2@h:1/", "no master name"),
            ("redis-sentinel://u:hunter2@h:1/m/2", "'/'"),
            ("redis-sentinel://u:hunter2@h:1/m?db=x", "db"),
            (
                "redis-sentinel://u:hunter2@h:1/m?prefx=a",
                "unknown parameter",
            ),
            ("redis-sentinel://u:hunter2@h:0/m", "port"),
            ("redis-sentinel://u:hunter2@/m", "no host"),
            ("redis-sentinel://u:hunter2@h:1/m#x", "fragment"),
            ("redis-sentinel://u:hunter2@h:1/m?prefix=a{b}", "prefix"),
        ] {
            let err = parse_sentinel(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{url}");
            let shown = err.to_string();
            assert!(shown.contains(fault), "{url}: {shown}");
            assert!(!shown.contains("hunter2"), "{url}: {shown}");
        }
    }

    #[test]
    fn replica_acknowledgement_in_both_schemes() {
        use std::time::Duration;
        let c = parse("redis://h:1/2?wait_replicas=2&prefix=a:&wait_timeout=150ms").unwrap();
        let ack = c.ack.unwrap();
        assert_eq!(
            (ack.replicas, ack.timeout, c.prefix.as_str()),
            (2, Duration::from_millis(150), "a:")
        );
        assert_eq!(c.info.redis_settings().db(), 2);
        assert!(parse("redis://h:1?wait_replicas=0").unwrap().ack.is_none());
        let c = parse_sentinel("redis-sentinel://s:1/m?wait_replicas=1&wait_timeout=1s&db=3");
        let c = c.unwrap();
        assert_eq!(c.ack.unwrap().replicas, 1);
        assert_eq!(c.node.redis_settings().db(), 3);
        for url in [
            "redis://u:hunter2@h:1?wait_replicas=1",
            "redis://u:hunter2@h:1?wait_replicas=1&wait_timeout=0",
            "redis://u:hunter2@h:1?wait_timeout=1s",
            "redis://u:hunter2@h:1?wait_replicas=x&wait_timeout=1s",
            "redis-sentinel://u:hunter2@s:1/m?wait_replicas=2",
            "redis-sentinel://u:hunter2@s:1/m?wait_replicas=2&wait_timeout=never",
        ] {
            let err = if is_sentinel(url) {
                parse_sentinel(url).unwrap_err()
            } else {
                parse(url).unwrap_err()
            };
            assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{url}");
            let shown = err.to_string();
            assert!(shown.contains("wait_"), "{url}: {shown}");
            assert!(!shown.contains("hunter2"), "{url}: {shown}");
        }
    }

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
        assert_eq!(c.prefix, "");
        let c = parse("redis://u:p?x@h:1/3?prefix=app1:&protocol=resp2").unwrap();
        assert_eq!(c.prefix, "app1:");
        assert_eq!(c.info.redis_settings().db(), 3);
        assert_eq!(c.info.redis_settings().password(), Some("p?x"));
        // The user-info holds a `?`: masked whole.
        assert_eq!(c.shown, "redis://***@h:1/3?prefix=app1:&protocol=resp2");
    }

    #[test]
    fn bad_urls_name_the_fault_and_hide_the_password() {
        for (url, fault) in [
            ("redis://", "no host"),
            ("redis://u:hunter2@h:port/0", "port"),
            ("redis://u:hunter2@h:0", "port"),
            ("redis://u:hunter2@h:6379/zero", "database"),
            ("http://u:hunter2@h:6379", "not a redis"),
            ("redis://u:hunter2@h:6379?prefix=a*", "prefix"),
            ("redis://u:hunter2@h:6379?prefix=", "prefix"),
        ] {
            let err = parse(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{url}");
            let shown = err.to_string();
            assert!(shown.contains(fault), "{url}: {shown}");
            assert!(!shown.contains("hunter2"), "{url}: {shown}");
        }
    }
}
