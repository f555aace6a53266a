//! `redlock://[user:password@]h1:p1,h2:p2,…[/db][?connect_timeout=T&response_timeout=T&prefix=P]`
//! → one `redis://` URL per master, the per-master timeouts and the key prefix.
//!
//! The masters are independent Redis servers (not replicas of each other): 3, 5 or 7 of them, so
//! a majority is well defined and survives `(n − 1) / 2` of them down; [`check_distinct`]
//! refuses one server listed as several. The user-info applies to every master. Messages show
//! the URL through [`crate::redact`] only.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::future::join_all;

use crate::error::{Error, ErrorKind, Result};
use crate::options::Options;
use crate::url::{after_hosts, authority, for_driver, parse_duration, redact, userinfo_end};

use ::redis::IntoConnectionInfo;

use super::NAME;
use crate::backends::redis::RedisConfig;
use crate::backends::redis::config::{host_port, setters};
use crate::backends::redis::keys::check_prefix;

const SCHEME: &str = "redlock://";
const EXPECTED: &str = "redlock://[user:password@]host:port,host:port,host:port[,…][/db]\
     [?connect_timeout=100ms&response_timeout=100ms&prefix=app1:] with 3, 5 or 7 masters";

/// How long one master may take to accept a connection, by default: small against a lease (the
/// default lease is 30 s), so a dead master costs an acquisition little of its validity.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How long one master may take to answer one request, by default (the Redis docs suggest 5 to
/// 50 ms for a 10 s lease; this leaves room for a loaded machine: under 2% of 30 s).
pub(super) const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);
/// The longest per-master timeout accepted: a master slower than this is treated as down.
const MAX_TIMEOUT: Duration = Duration::from_secs(10);

/// The typed configuration of the Redlock store, equal in power to its URL: each URL
/// parameter is a field (the table in the module docs). Build it with [`RedlockConfig::new`]
/// and the setters, parse it with [`RedlockConfig::from_url`] or deserialize it (feature
/// `serde`); then [`RedlockBackend::connect_config`](super::RedlockBackend::connect_config).
///
/// `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct RedlockConfig {
    /// The independent masters as `(host, port)`: 3, 5 or 7 of them.
    pub masters: Vec<(String, u16)>,
    /// Every master's ACL user, if any.
    pub username: Option<String>,
    /// Every master's password, if any.
    pub password: Option<String>,
    /// The database on every master (`redlock://…/N`).
    #[cfg_attr(feature = "serde", serde(default))]
    pub db: u32,
    /// Put before every key and channel (`?prefix=app1:`), or empty for none.
    #[cfg_attr(feature = "serde", serde(default))]
    pub prefix: String,
    /// How long one master may take to accept a connection (`?connect_timeout=`); `None`:
    /// [`Options::connect_timeout`], else 500 ms. Above 0 and at most 10 s.
    #[cfg_attr(
        feature = "serde",
        serde(default, with = "crate::config_serde::optional_duration")
    )]
    pub connect_timeout: Option<Duration>,
    /// How long one master may take to answer one request (`?response_timeout=`); `None`:
    /// [`Options::response_timeout`], else 500 ms. Above 0 and at most 10 s.
    #[cfg_attr(
        feature = "serde",
        serde(default, with = "crate::config_serde::optional_duration")
    )]
    pub response_timeout: Option<Duration>,
}

crate::config_debug::debug_without_secrets!(RedlockConfig {
    masters,
    username,
    password: secret,
    db,
    prefix,
    connect_timeout,
    response_timeout,
});

impl RedlockConfig {
    /// The independent masters at these `(host, port)` (3, 5 or 7).
    pub fn new<H: Into<String>>(masters: impl IntoIterator<Item = (H, u16)>) -> Self {
        RedlockConfig {
            masters: masters.into_iter().map(|(h, p)| (h.into(), p)).collect(),
            username: None,
            password: None,
            db: 0,
            prefix: String::new(),
            connect_timeout: None,
            response_timeout: None,
        }
    }

    /// Parses a `redlock://` URL.
    pub fn from_url(url: &str) -> Result<Self> {
        let config = parse_url(url)?;
        config
            .check(&Options::default())
            .map_err(|why| invalid(url, why))?;
        Ok(config)
    }

    setters! {
        /// Every master's ACL user.
        username(username: impl Into<String>) username = Some(username.into());
        /// Every master's password.
        password(password: impl Into<String>) password = Some(password.into());
        /// The database on every master.
        db(db: u32) db = db;
        /// Put before every key and channel.
        prefix(prefix: impl Into<String>) prefix = prefix.into();
        /// How long one master may take to accept a connection.
        connect_timeout(timeout: Duration) connect_timeout = Some(timeout);
        /// How long one master may take to answer one request.
        response_timeout(timeout: Duration) response_timeout = Some(timeout);
    }

    /// The configuration as a URL with its password masked: the only form messages show.
    pub fn shown(&self) -> String {
        let login = match (&self.username, &self.password) {
            (user, Some(_)) => format!("{}:***@", user.as_deref().unwrap_or("")),
            (Some(user), None) => format!("{user}@"),
            (None, None) => String::new(),
        };
        let db = if self.db == 0 {
            String::new()
        } else {
            format!("/{}", self.db)
        };
        let mut query = Vec::new();
        if let Some(t) = self.connect_timeout {
            query.push(format!("connect_timeout={}ms", t.as_millis()));
        }
        if let Some(t) = self.response_timeout {
            query.push(format!("response_timeout={}ms", t.as_millis()));
        }
        if !self.prefix.is_empty() {
            query.push(format!("prefix={}", self.prefix));
        }
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{}", query.join("&"))
        };
        format!(
            "{SCHEME}{login}{}{db}{query}",
            self.shown_masters().join(",")
        )
    }

    fn shown_masters(&self) -> Vec<String> {
        self.masters
            .iter()
            .map(|(host, port)| host_port(host, *port))
            .collect()
    }

    /// Checks the settings, with `options` for the timeouts the configuration leaves out, and
    /// reads what connecting needs. The error says what is wrong.
    pub(super) fn check(&self, options: &Options) -> std::result::Result<Settings, String> {
        let n = self.masters.len();
        if ![3, 5, 7].contains(&n) {
            return Err(match n {
                1 => "one master is a single point of failure: use redis:// for one server"
                    .to_string(),
                _ if n.is_multiple_of(2) => format!(
                    "{n} masters: an even count survives no more failed masters than {} would \
                     (a majority of {n} is {}); use 3, 5 or 7",
                    n.saturating_sub(1),
                    n / 2 + 1
                ),
                _ => format!("{n} masters; use 3, 5 or 7"),
            });
        }
        if self.masters.iter().any(|(host, _)| host.is_empty()) {
            return Err("no host for a master".to_string());
        }
        if self.masters.iter().any(|(_, port)| *port == 0) {
            return Err("port 0 is no port".to_string());
        }
        if !self.prefix.is_empty() {
            check_prefix(&self.prefix)?;
        }
        let connect_timeout = check_timeout(
            "connect_timeout",
            self.connect_timeout
                .or(options.connect_timeout)
                .unwrap_or(CONNECT_TIMEOUT),
        )?;
        let response_timeout = check_timeout(
            "response_timeout",
            self.response_timeout
                .or(options.response_timeout)
                .unwrap_or(RESPONSE_TIMEOUT),
        )?;
        let masters = self
            .masters
            .iter()
            .map(|(host, port)| {
                let mut master = RedisConfig::new(host.clone(), *port).db(self.db);
                master.username = self.username.clone();
                master.password = self.password.clone();
                master.prefix = self.prefix.clone();
                master
            })
            .collect();
        Ok(Settings {
            shown: self.shown(),
            masters,
            shown_masters: self.shown_masters(),
            connect_timeout,
            response_timeout,
            prefix: self.prefix.clone(),
        })
    }
}

/// What `connect` needs: the checked configuration (its `Debug` shows no password).
#[derive(Debug)]
pub(super) struct Settings {
    /// The configuration as a URL with its password masked: the only form ever shown.
    pub(super) shown: String,
    /// One single-server configuration per master (password included: never shown).
    pub(super) masters: Vec<RedisConfig>,
    /// Each master's `host:port`, for messages.
    pub(super) shown_masters: Vec<String>,
    pub(super) connect_timeout: Duration,
    pub(super) response_timeout: Duration,
    /// Put before every key and channel, or empty.
    pub(super) prefix: String,
}

fn invalid(url: &str, why: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::InvalidUrl,
        format!("{:?}: {why}; expected {EXPECTED}", redact(url)),
    )
    .with_backend(NAME)
}

fn check_timeout(what: &str, timeout: Duration) -> std::result::Result<Duration, String> {
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(format!(
            "{what} must be above 0 and at most {}s (a master slower than that is down)",
            MAX_TIMEOUT.as_secs()
        ));
    }
    Ok(timeout)
}

/// Checks `url` and `options` and turns them into per-master settings. A timeout in the URL wins
/// over one in `options`.
#[cfg(test)]
pub(super) fn parse(url: &str, options: &Options) -> Result<Settings> {
    parse_url(url)?
        .check(options)
        .map_err(|why| invalid(url, why))
}

/// `url` read into a configuration (not yet checked as a whole).
fn parse_url(url: &str) -> Result<RedlockConfig> {
    if !url
        .get(..SCHEME.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(SCHEME))
    {
        return Err(invalid(url, "not a redlock:// URL"));
    }
    let servers = authority(url, NAME, EXPECTED)?;
    // The user-info as written (still %-encoded, and its '@', '/', '?' and '#' encoded by
    // `for_driver`): redis-rs decodes it as for redis://. A password without a user (`:pw@`,
    // Redis' `requirepass`) is fine here.
    let driver_url = for_driver(url);
    let rest = &driver_url[SCHEME.len()..];
    let (userinfo, hosts_and_rest) = match userinfo_end(rest) {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let without_userinfo = format!("{SCHEME}{hosts_and_rest}");
    let parts = after_hosts(&without_userinfo).map_err(|why| invalid(url, why))?;
    let mut config = RedlockConfig::new(servers.servers(6379));
    if !parts.path.is_empty() {
        config.db = parts
            .path
            .parse::<u32>()
            .map_err(|_| invalid(url, "the path must be a database number (e.g. /0)"))?;
    }
    if let Some(userinfo) = userinfo {
        let info = format!("redis://{userinfo}@127.0.0.1:6379")
            .into_connection_info()
            .map_err(|e| {
                invalid(
                    url,
                    format!("rejected by the Redis client ({:?})", e.kind()),
                )
            })?;
        let settings = info.redis_settings();
        config.username = settings.username().map(str::to_string);
        config.password = settings.password().map(str::to_string);
    }
    for (key, value) in &parts.query {
        if *key == "prefix" {
            check_prefix(value).map_err(|why| invalid(url, why))?;
            config.prefix = value.to_string();
            continue;
        }
        if matches!(*key, "wait_replicas" | "wait_timeout") {
            return Err(invalid(
                url,
                "wait_replicas is for redis://, redis-sentinel:// and redis-cluster:// (a master \
                 and its replicas); Redlock's masters are independent, and a majority of them is \
                 what a take needs",
            ));
        }
        let timeout = parse_duration(value)
            .ok_or_else(|| invalid(url, format!("{key} is not a duration (e.g. 100ms, 1s)")));
        match *key {
            "connect_timeout" => config.connect_timeout = Some(timeout?),
            "response_timeout" => config.response_timeout = Some(timeout?),
            _ => {
                return Err(invalid(
                    url,
                    "an unknown parameter (known: connect_timeout, response_timeout, prefix)",
                ));
            }
        }
    }
    Ok(config)
}

/// Refuses masters that are one server under several names (`127.0.0.1:6379` and
/// `localhost:6379`) or listed twice: a majority of them would be no majority of independent
/// servers (one server down would take the "majority" with it), so the URL is a mistake, and
/// the error names the masters. Each host is resolved (within the connect timeout); masters
/// that share a socket address are one server. A host that does not resolve is compared by name
/// (connecting to it will fail anyway).
pub(super) async fn check_distinct(config: &Settings) -> Result<()> {
    let resolve = |host_port: &str| {
        let lookup = tokio::net::lookup_host(host_port.to_string());
        async move {
            match tokio::time::timeout(config.connect_timeout, lookup).await {
                Ok(Ok(addresses)) => addresses.collect(),
                _ => Vec::new(),
            }
        }
    };
    let resolved: Vec<Vec<SocketAddr>> =
        join_all(config.shown_masters.iter().map(|m| resolve(m))).await;
    let groups = same_servers(&config.shown_masters, &resolved);
    if groups.len() == config.shown_masters.len() {
        return Ok(());
    }
    let shared: Vec<String> = groups
        .iter()
        .filter(|group| group.len() > 1)
        .map(|group| {
            let names: Vec<&str> = group
                .iter()
                .map(|&i| config.shown_masters[i].as_str())
                .collect();
            if names.iter().all(|n| n.eq_ignore_ascii_case(names[0])) {
                let times = match names.len() {
                    2 => "twice".to_string(),
                    k => format!("{k} times"),
                };
                return format!("{} is listed {times}", names[0]);
            }
            let (last, rest) = names.split_last().unwrap_or((&"", &[]));
            let address = resolved[group[0]]
                .iter()
                .find(|a| group.iter().all(|&i| resolved[i].contains(a)))
                .map(|a| format!(" ({a})"))
                .unwrap_or_default();
            format!("{} and {last} are one server{address}", rest.join(", "))
        })
        .collect();
    let n = config.shown_masters.len();
    Err(Error::new(
        ErrorKind::InvalidUrl,
        format!(
            "{:?}: {}: {n} masters listed, {} distinct; Redlock's majority holds only across \
             independent servers, so list each master once; expected {EXPECTED}",
            config.shown,
            shared.join("; "),
            groups.len()
        ),
    )
    .with_backend(NAME))
}

/// The masters (by index, each group in listed order) grouped by server: two are one server
/// when they share a resolved address, or, where either did not resolve, when they are written
/// alike (the host's case aside).
fn same_servers(shown: &[String], resolved: &[Vec<SocketAddr>]) -> Vec<Vec<usize>> {
    let same = |i: usize, j: usize| {
        if resolved[i].is_empty() || resolved[j].is_empty() {
            shown[i].eq_ignore_ascii_case(&shown[j])
        } else {
            resolved[i].iter().any(|a| resolved[j].contains(a))
        }
    };
    // Each master's group is named by its first member; at most 7 masters.
    let mut first: Vec<usize> = (0..shown.len()).collect();
    for j in 0..shown.len() {
        for i in 0..j {
            if same(i, j) {
                let (keep, gone) = (first[i].min(first[j]), first[i].max(first[j]));
                first
                    .iter_mut()
                    .filter(|f| **f == gone)
                    .for_each(|f| *f = keep);
            }
        }
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, f) in first.iter().enumerate() {
        match groups.iter_mut().find(|g| g[0] == *f) {
            Some(group) => group.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_user_db_and_timeouts() {
        let url =
            "redlock://app:s%40cret@h1:7001,h2:7002,h3/2?response_timeout=40ms&connect_timeout=1s";
        let c = parse(url, &Options::default()).unwrap();
        let master = |host: &str, port| {
            RedisConfig::new(host, port)
                .username("app")
                .password("s@cret")
                .db(2)
        };
        assert_eq!(
            c.masters,
            [master("h1", 7001), master("h2", 7002), master("h3", 6379)]
        );
        assert_eq!(c.response_timeout, Duration::from_millis(40));
        assert_eq!(c.connect_timeout, Duration::from_secs(1));
        assert!(!c.shown.contains("s@cret") && !c.shown.contains("s%40cret"));
        // Every parameter is a field.
        let built = RedlockConfig::new([("h1", 7001), ("h2", 7002), ("h3", 6379)])
            .username("app")
            .password("s@cret")
            .db(2)
            .response_timeout(Duration::from_millis(40))
            .connect_timeout(Duration::from_secs(1));
        let parsed = RedlockConfig::from_url(url).unwrap();
        assert_eq!(parsed, built);
        assert!(!format!("{parsed:?}").contains("s@cret"));
        assert_eq!(
            RedlockConfig::from_url("redlock://a,b,c?prefix=app1:").unwrap(),
            RedlockConfig::new([("a", 6379), ("b", 6379), ("c", 6379)]).prefix("app1:")
        );
        let plain = parse(
            "redlock://a:1,b:2,c:3,d:4,e:5",
            &Options::default().response_timeout(Duration::from_millis(30)),
        )
        .unwrap();
        assert_eq!(plain.masters.len(), 5);
        assert_eq!(plain.masters[4], RedisConfig::new("e", 5));
        assert_eq!(plain.response_timeout, Duration::from_millis(30));
        assert_eq!(plain.connect_timeout, CONNECT_TIMEOUT);
        let password_only = parse("redlock://:pw@a,b,c", &Options::default()).unwrap();
        assert_eq!(
            password_only.masters[0],
            RedisConfig::new("a", 6379).password("pw")
        );
        // An unencoded '@' and '/' in the password: the masters are a, b and c, not "ss".
        let c = parse("redlock://:p@ss/w0rd@a,b,c/1", &Options::default()).unwrap();
        assert_eq!(
            c.masters[2],
            RedisConfig::new("c", 6379).password("p@ss/w0rd").db(1)
        );
        assert_eq!(c.shown, "redlock://:***@a:6379,b:6379,c:6379/1");
    }

    #[cfg(feature = "serde")]
    #[test]
    fn from_json() {
        let json = r#"{"masters": [["a", 1], ["b", 2], ["c", 3]], "password": "pw",
            "response_timeout": "40ms", "connect_timeout": 1}"#;
        let config: RedlockConfig = serde_json::from_str(json).unwrap();
        let built = RedlockConfig::new([("a", 1), ("b", 2), ("c", 3)])
            .password("pw")
            .response_timeout(Duration::from_millis(40))
            .connect_timeout(Duration::from_secs(1));
        assert_eq!(config, built);
        assert!(serde_json::from_str::<RedlockConfig>(r#"{"masters": [], "quorum": 2}"#).is_err());
    }

    #[test]
    fn masters_sharing_an_address_or_a_name_are_one_server() {
        let shown: Vec<String> = ["a:1", "B:1", "b:1", "c:1", "d:1"]
            .map(String::from)
            .to_vec();
        let at = |ports: &[u16]| -> Vec<SocketAddr> {
            ports
                .iter()
                .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
                .collect()
        };
        // a and d share an address (d has two, as `localhost` may); B and b do not resolve and
        // are written alike; c is alone.
        let resolved = [at(&[1]), vec![], vec![], at(&[3]), at(&[2, 1])];
        assert_eq!(
            same_servers(&shown, &resolved),
            [vec![0, 4], vec![1, 2], vec![3]]
        );
        let distinct = [at(&[1]), at(&[2]), at(&[3])];
        assert_eq!(
            same_servers(&shown[..3], &distinct),
            [vec![0], vec![1], vec![2]]
        );
        // Unresolved and written differently: not known to be one.
        assert_eq!(
            same_servers(&shown[..2], &[vec![], vec![]]),
            [vec![0], vec![1]]
        );
    }

    #[test]
    fn bad_urls_say_why_without_the_password() {
        for (url, why) in [
            ("redlock://u:hunter2@a:1,b:2", "2 masters"),
            ("redlock://u:hunter2@a:1,b:2,c:3,d:4", "4 masters"),
            ("redlock://u:hunter2@a:1", "single point of failure"),
            ("redlock://u:hunter2@a,b,c,d,e,f,g,h,i", "9 masters"),
            (
                "redlock://u:hunter2@a,b,c?response_timeout=0ms",
                "response_timeout",
            ),
            (
                "redlock://u:hunter2@a,b,c?connect_timeout=soon",
                "connect_timeout",
            ),
            (
                "redlock://u:hunter2@a,b,c?response_timeout=1h",
                "response_timeout",
            ),
            ("redlock://u:hunter2@a,b,c?password=x", "unknown parameter"),
            (
                "redlock://u:hunter2@a,b,c?wait_replicas=1&wait_timeout=1s",
                "independent",
            ),
            ("redlock://u:hunter2@a,b,c/x", "database number"),
            ("redlock://u:hunter2@a,,c", "no host"),
            ("redis://u:hunter2@a,b,c", "not a redlock"),
        ] {
            let err = parse(url, &Options::default()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{url}");
            let shown = format!("{err} {err:?}");
            assert!(shown.contains(why), "{url}: {shown}");
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        let err = parse(
            "redlock://a,b,c",
            &Options::default().connect_timeout(Duration::ZERO),
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidUrl);
    }
}
