//! [`RedisConfig`]: the typed configuration of one Redis server, the master a set of Sentinels
//! names, or a Redis Cluster, and the URL parsers that produce it:
//! `redis://[user:password@]host:port[/db]`, `rediss://…`,
//! `redis-sentinel://[user:password@]host:port[,host:port…]/MASTER_NAME[?db=N&sentinel_password=P]`
//! and `redis-cluster://[user:password@]h1:p1[,h2:p2…]`.
//!
//! A URL is checked here so a typo gets a precise [`ErrorKind::InvalidUrl`] naming the part at
//! fault; a configuration built in code is checked by the same rules ([`RedisConfig::check`],
//! [`ErrorKind::InvalidInput`]). Every message shows the URL through [`crate::redact`], or the
//! configuration as such a URL ([`RedisConfig::shown`]), so a password never reaches an error, a
//! log line or `Debug`.

use std::time::Duration;

use ::redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion};

use super::keys::check_prefix;
use super::replicas::{ReplicaAck, WAIT_REPLICAS, WAIT_TIMEOUT};
use crate::error::{Error, ErrorKind, Result};
use crate::url::{
    AroundHosts, around_hosts, authority, for_driver, percent_decode, redact, userinfo_end,
};

/// A Redis node's port, for a host given without one.
const DEFAULT_PORT: u16 = 6379;
/// Sentinel's own port, for a host given without one.
const SENTINEL_PORT: u16 = 26379;

/// Builder setters written once: each `name(arg) -> Self` sets the field named before the
/// `=` to the expression after it.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident($arg:ident: $ty:ty) $field:ident = $value:expr;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, $arg: $ty) -> Self {
                self.$field = $value;
                self
            }
        )*
    };
}
// Redlock writes its setters with it too.
#[cfg(feature = "redlock")]
pub(crate) use setters;

/// Where the Redis store is: one server, the master a set of Sentinels names, or a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "snake_case", deny_unknown_fields)
)]
pub enum RedisTopology {
    /// One server (`redis://host:port`, `rediss://` with [`RedisConfig::tls`]).
    Server {
        /// Host name or IP address (an IPv6 address without brackets).
        host: String,
        /// Its port (6379 in a URL without one).
        port: u16,
    },
    /// The master the Sentinels monitor under `master_name`, followed across failovers
    /// (`redis-sentinel://s1:p1,s2:p2/MASTER_NAME`).
    Sentinel {
        /// The Sentinels' `(host, port)`, asked in this order (26379 in a URL without a port).
        sentinels: Vec<(String, u16)>,
        /// The name the Sentinels monitor the master under.
        master_name: String,
    },
    /// A Redis Cluster, learnt from any of these nodes (`redis-cluster://h1:p1,h2:p2`).
    Cluster {
        /// Some nodes of the cluster as `(host, port)`: the client finds the others.
        nodes: Vec<(String, u16)>,
    },
}

/// The typed configuration of the Redis store, equal in power to its URLs: each URL parameter
/// is a field (the table in the module docs). Build it with [`RedisConfig::new`],
/// [`RedisConfig::sentinel`] or [`RedisConfig::cluster`] and the setters, parse it from a URL
/// with [`RedisConfig::from_url`], or deserialize it (feature `serde`); then
/// [`RedisBackend::connect_config`](super::RedisBackend::connect_config).
///
/// `Debug` never shows a password.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct RedisConfig {
    /// Where the store is.
    pub topology: RedisTopology,
    /// The data nodes' ACL user (the URL's user-info), if any.
    pub username: Option<String>,
    /// The data nodes' password (`requirepass`, or the ACL user's), if any.
    pub password: Option<String>,
    /// The database (`redis://host/N`, `redis-sentinel://…?db=N`); a cluster has 0 only.
    #[cfg_attr(feature = "serde", serde(default))]
    pub db: u32,
    /// TLS (`rediss://`; one server only). The application installs rustls' crypto provider.
    #[cfg_attr(feature = "serde", serde(default))]
    pub tls: bool,
    /// With TLS, accept any certificate and host name (`rediss://…#insecure`, redis-rs').
    #[cfg_attr(feature = "serde", serde(default))]
    pub tls_insecure: bool,
    /// RESP3 on the connections redis-rs opens (`?protocol=resp3`; one server only). distlock's
    /// own plain-TCP command connection speaks RESP2 whatever this says.
    #[cfg_attr(feature = "serde", serde(default))]
    pub resp3: bool,
    /// Put before every key and channel (`?prefix=app1:`), or empty for none.
    #[cfg_attr(feature = "serde", serde(default))]
    pub prefix: String,
    /// Replicas that must acknowledge each take and renewal (`?wait_replicas=N`); 0: none.
    #[cfg_attr(feature = "serde", serde(default))]
    pub wait_replicas: u32,
    /// How long a take waits for them (`?wait_timeout=100ms`); required with `wait_replicas`.
    #[cfg_attr(
        feature = "serde",
        serde(default, with = "crate::config_serde::optional_duration")
    )]
    pub wait_timeout: Option<Duration>,
    /// Behind Sentinel: the Sentinels' own ACL user (`?sentinel_user=`), if any.
    pub sentinel_username: Option<String>,
    /// Behind Sentinel: the Sentinels' own password (`?sentinel_password=`), if they have one.
    pub sentinel_password: Option<String>,
}

crate::config_debug::debug_without_secrets!(RedisConfig {
    topology,
    username,
    password: secret,
    db,
    tls,
    tls_insecure,
    resp3,
    prefix,
    wait_replicas,
    wait_timeout,
    sentinel_username,
    sentinel_password: secret,
});

impl RedisConfig {
    fn with_topology(topology: RedisTopology) -> Self {
        RedisConfig {
            topology,
            username: None,
            password: None,
            db: 0,
            tls: false,
            tls_insecure: false,
            resp3: false,
            prefix: String::new(),
            wait_replicas: 0,
            wait_timeout: None,
            sentinel_username: None,
            sentinel_password: None,
        }
    }

    /// One server at `host:port` (what `redis://host:port` says).
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Self::with_topology(RedisTopology::Server {
            host: host.into(),
            port,
        })
    }

    /// The master the `sentinels` (`(host, port)`) monitor under `master_name`.
    pub fn sentinel<H: Into<String>>(
        sentinels: impl IntoIterator<Item = (H, u16)>,
        master_name: impl Into<String>,
    ) -> Self {
        Self::with_topology(RedisTopology::Sentinel {
            sentinels: sentinels.into_iter().map(|(h, p)| (h.into(), p)).collect(),
            master_name: master_name.into(),
        })
    }

    /// The Redis Cluster these `(host, port)` nodes belong to.
    pub fn cluster<H: Into<String>>(nodes: impl IntoIterator<Item = (H, u16)>) -> Self {
        Self::with_topology(RedisTopology::Cluster {
            nodes: nodes.into_iter().map(|(h, p)| (h.into(), p)).collect(),
        })
    }

    /// Parses a `redis://`, `rediss://`, `redis-sentinel://` or `redis-cluster://` URL.
    pub fn from_url(url: &str) -> Result<Self> {
        if is_sentinel(url) {
            parse_sentinel(url)
        } else if has_scheme(url, CLUSTER_SCHEME) {
            parse_cluster(url)
        } else {
            parse(url)
        }
    }

    setters! {
        /// The data nodes' ACL user.
        username(username: impl Into<String>) username = Some(username.into());
        /// The data nodes' password.
        password(password: impl Into<String>) password = Some(password.into());
        /// The database (one server or behind Sentinel).
        db(db: u32) db = db;
        /// TLS to the one server.
        tls(tls: bool) tls = tls;
        /// With TLS, accept any certificate (for tests only).
        tls_insecure(insecure: bool) tls_insecure = insecure;
        /// RESP3 on the connections redis-rs opens.
        resp3(resp3: bool) resp3 = resp3;
        /// Put before every key and channel.
        prefix(prefix: impl Into<String>) prefix = prefix.into();
        /// The Sentinels' own ACL user.
        sentinel_username(username: impl Into<String>) sentinel_username = Some(username.into());
        /// The Sentinels' own password.
        sentinel_password(password: impl Into<String>) sentinel_password = Some(password.into());
    }

    /// `replicas` must acknowledge each take and renewal within `timeout`.
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_replicas = replicas;
        self.wait_timeout = Some(timeout);
        self
    }

    /// The configuration as a URL with its passwords masked: the only form messages show.
    pub fn shown(&self) -> String {
        let login = match (&self.username, &self.password) {
            (user, Some(_)) => format!("{}:***@", user.as_deref().unwrap_or("")),
            (Some(user), None) => format!("{user}@"),
            (None, None) => String::new(),
        };
        let mut query = Vec::new();
        let (scheme, hosts, path) = match &self.topology {
            RedisTopology::Server { host, port } => {
                let scheme = if self.tls { "rediss" } else { "redis" };
                let path = if self.db == 0 {
                    String::new()
                } else {
                    format!("/{}", self.db)
                };
                (scheme, hosts(&[(host.clone(), *port)]), path)
            }
            RedisTopology::Sentinel {
                sentinels,
                master_name,
            } => {
                if self.db != 0 {
                    query.push(format!("db={}", self.db));
                }
                (
                    "redis-sentinel",
                    hosts(sentinels),
                    format!("/{master_name}"),
                )
            }
            RedisTopology::Cluster { nodes } => ("redis-cluster", hosts(nodes), String::new()),
        };
        if self.resp3 {
            query.push("protocol=resp3".to_string());
        }
        if !self.prefix.is_empty() {
            query.push(format!("prefix={}", self.prefix));
        }
        if self.wait_replicas > 0 {
            query.push(format!("{WAIT_REPLICAS}={}", self.wait_replicas));
        }
        if let Some(timeout) = self.wait_timeout {
            query.push(format!("{WAIT_TIMEOUT}={}ms", timeout.as_millis()));
        }
        if let Some(user) = &self.sentinel_username {
            query.push(format!("{SENTINEL_USER}={user}"));
        }
        if self.sentinel_password.is_some() {
            query.push(format!("{SENTINEL_PASSWORD}=***"));
        }
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{}", query.join("&"))
        };
        let fragment = if self.tls_insecure { "#insecure" } else { "" };
        format!("{scheme}://{login}{hosts}{path}{query}{fragment}")
    }

    /// Checks the settings against each other and the store's rules, and reads what the
    /// connection needs from them. The error says what is wrong, for an `InvalidUrl` or an
    /// `InvalidInput`.
    pub(super) fn check(&self) -> std::result::Result<Checked, String> {
        if !self.prefix.is_empty() {
            check_prefix(&self.prefix)?;
        }
        let ack = ReplicaAck::new(self.wait_replicas, self.wait_timeout)?;
        let one_server = matches!(self.topology, RedisTopology::Server { .. });
        if !one_server && (self.tls || self.tls_insecure) {
            return Err(
                "TLS is for one server (rediss://); distlock does not offer it behind \
                        Sentinel or on a cluster yet: bring your own client (from_client, \
                        from_cluster_client) with TLS set up"
                    .to_string(),
            );
        }
        if self.tls_insecure && !self.tls {
            return Err("tls_insecure without tls means nothing".to_string());
        }
        if !one_server && self.resp3 {
            return Err("protocol (RESP3) is for one server".to_string());
        }
        let behind_sentinel = matches!(self.topology, RedisTopology::Sentinel { .. });
        if !behind_sentinel
            && (self.sentinel_username.is_some() || self.sentinel_password.is_some())
        {
            return Err(
                "sentinel_user and sentinel_password are for redis-sentinel://".to_string(),
            );
        }
        let sentinel_login = match (&self.sentinel_username, &self.sentinel_password) {
            (None, None) => None,
            (_, Some(password)) if password.is_empty() => {
                return Err(
                    "sentinel_password is empty (leave it out for Sentinels without a password)"
                        .to_string(),
                );
            }
            (user, Some(password)) => Some(SentinelLogin {
                user: user.clone(),
                password: password.clone(),
            }),
            (Some(_), None) => {
                return Err(
                    "sentinel_user without sentinel_password (a Sentinel's user logs in \
                            with a password)"
                        .to_string(),
                );
            }
        };
        match &self.topology {
            RedisTopology::Server { host, port } => check_node(host, *port)?,
            RedisTopology::Sentinel {
                sentinels,
                master_name,
            } => {
                check_nodes(sentinels)?;
                if master_name.is_empty() {
                    return Err(
                        "no master name (the name the Sentinels monitor it under)".to_string()
                    );
                }
                if master_name.contains(['/', ' ']) {
                    return Err(
                        "the master's name has a '/' or a space; put the database in \
                                ?db=N"
                            .to_string(),
                    );
                }
            }
            RedisTopology::Cluster { nodes } => {
                check_nodes(nodes)?;
                if self.db != 0 {
                    return Err(
                        "a database other than 0: a Redis Cluster has database 0 only".to_string(),
                    );
                }
            }
        }
        Ok(Checked {
            info: self.connection_info(),
            ack,
            sentinel_login,
        })
    }

    /// redis-rs' settings of one node: the server's address (behind Sentinel or on a cluster a
    /// placeholder, replaced by each node's), user, password, database and protocol.
    fn connection_info(&self) -> ConnectionInfo {
        let (host, port) = match &self.topology {
            RedisTopology::Server { host, port } => (host.clone(), *port),
            _ => ("127.0.0.1".to_string(), DEFAULT_PORT),
        };
        let addr = if self.tls {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: self.tls_insecure,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host, port)
        };
        let mut settings = ::redis::RedisConnectionInfo::default().set_db(i64::from(self.db));
        if let Some(user) = &self.username {
            settings = settings.set_username(user);
        }
        if let Some(password) = &self.password {
            settings = settings.set_password(password);
        }
        if self.resp3 {
            settings = settings.set_protocol(ProtocolVersion::RESP3);
        }
        // A `ConnectionAddr` always makes a `ConnectionInfo`.
        let info = addr
            .into_connection_info()
            .expect("a ConnectionAddr is a ConnectionInfo");
        info.set_redis_settings(settings)
    }
}

/// `host:port`, an IPv6 literal back in brackets.
pub(crate) fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn hosts(nodes: &[(String, u16)]) -> String {
    let shown: Vec<String> = nodes.iter().map(|(h, p)| host_port(h, *p)).collect();
    shown.join(",")
}

fn check_node(host: &str, port: u16) -> std::result::Result<(), String> {
    if host.is_empty() {
        return Err("no host".to_string());
    }
    if port == 0 {
        return Err(format!("{host}: port 0 is no port"));
    }
    Ok(())
}

fn check_nodes(nodes: &[(String, u16)]) -> std::result::Result<(), String> {
    if nodes.is_empty() {
        return Err("no host".to_string());
    }
    nodes
        .iter()
        .try_for_each(|(host, port)| check_node(host, *port))
}

/// What [`RedisConfig::check`] reads for the connection.
pub(super) struct Checked {
    /// redis-rs' settings, password included (never shown).
    pub(super) info: ConnectionInfo,
    /// Replicas that must acknowledge each take, if any.
    pub(super) ack: Option<ReplicaAck>,
    /// Behind Sentinel: how to log in to the Sentinels, if they want it.
    pub(super) sentinel_login: Option<SentinelLogin>,
}

const EXPECTED: &str = "redis://[user:password@]host:port[/db][?prefix=app1:\
                        &wait_replicas=N&wait_timeout=100ms&protocol=resp3] or rediss://…";

fn invalid(url: &str, expected: &str, why: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::InvalidUrl,
        format!("{:?}: {why}; expected {expected}", redact(url)),
    )
    .with_backend("redis")
}

/// `config` checked as `url`'s, its faults reported against the URL.
fn checked(url: &str, expected: &str, config: RedisConfig) -> Result<RedisConfig> {
    config.check().map_err(|why| invalid(url, expected, why))?;
    Ok(config)
}

/// Whether `url` starts with `scheme` (schemes are case-insensitive).
fn has_scheme(url: &str, scheme: &str) -> bool {
    url.get(..scheme.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
}

/// Checks a `redis://` or `rediss://` URL.
fn parse(url: &str) -> Result<RedisConfig> {
    let bad = |why: &str| invalid(url, EXPECTED, why);
    let tls = if has_scheme(url, "rediss://") {
        true
    } else if has_scheme(url, "redis://") {
        false
    } else {
        return Err(bad("not a redis:// or rediss:// URL"));
    };
    let servers = authority(url, "redis", EXPECTED)?;
    if servers.hosts.len() != 1 {
        return Err(bad(
            "one server only (for several independent masters, use redlock://)",
        ));
    }
    let rest = &url[url.find("://").map_or(0, |i| i + 3)..];
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
        return Err(bad(
            "the database (after the /) is not a number, as in redis://host:port/0",
        ));
    }
    let (driver_url, params) = take_params(url).map_err(|why| bad(&why))?;
    // redis-rs reads the address, user-info (%-escapes, a password alone), database and
    // `#insecure` as its own clients do.
    let info = for_driver(&driver_url)
        .into_connection_info()
        .map_err(|e| bad(&format!("rejected by the Redis client ({:?})", e.kind())))?;
    let (host, port, tls_insecure) = match info.addr() {
        ConnectionAddr::Tcp(host, port) => (host.clone(), *port, false),
        ConnectionAddr::TcpTls {
            host,
            port,
            insecure,
            ..
        } => (host.clone(), *port, *insecure),
        _ => return Err(bad("not a TCP address")),
    };
    let mut config = RedisConfig::new(host, port);
    config.tls = tls;
    config.tls_insecure = tls_insecure;
    login_of(&info, &mut config);
    config.db = u32::try_from(info.redis_settings().db()).map_err(|_| bad("a bad database"))?;
    params.apply(&mut config).map_err(|why| bad(&why))?;
    checked(url, EXPECTED, config)
}

/// The user and password redis-rs read into `info`, into `config`.
fn login_of(info: &ConnectionInfo, config: &mut RedisConfig) {
    let settings = info.redis_settings();
    config.username = settings.username().map(str::to_string);
    config.password = settings.password().map(str::to_string);
}

/// The parameters every Redis URL takes, as written (checked by [`RedisConfig::check`]).
#[derive(Default)]
struct Params<'a> {
    prefix: Option<&'a str>,
    wait_replicas: Option<&'a str>,
    wait_timeout: Option<&'a str>,
    resp3: bool,
}

impl<'a> Params<'a> {
    /// Takes `key=value` if it is one of these: false if it is not.
    fn take(&mut self, key: &str, value: &'a str) -> std::result::Result<bool, String> {
        match key {
            "prefix" => {
                check_prefix(value)?;
                self.prefix = Some(value);
            }
            WAIT_REPLICAS => self.wait_replicas = Some(value),
            WAIT_TIMEOUT => self.wait_timeout = Some(value),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The parameters read into `config`; the error says which is wrong.
    fn apply(self, config: &mut RedisConfig) -> std::result::Result<(), String> {
        config.prefix = self.prefix.unwrap_or_default().to_string();
        config.resp3 = self.resp3;
        let (replicas, timeout) = ReplicaAck::parse(self.wait_replicas, self.wait_timeout)?;
        config.wait_replicas = replicas;
        config.wait_timeout = timeout;
        Ok(())
    }
}

/// `url` without its query (but for its fragment), and the query's parameters. The query starts
/// at the first `?` after the user-info, which may hold one.
fn take_params(url: &str) -> std::result::Result<(String, Params<'_>), String> {
    let hosts_start = url.find("://").map_or(0, |i| i + 3);
    let hosts_start = hosts_start + userinfo_end(&url[hosts_start..]).map_or(0, |at| at + 1);
    let Some(query_start) = url[hosts_start..].find('?').map(|i| hosts_start + i) else {
        return Ok((url.to_string(), Params::default()));
    };
    let (query, fragment) = match url[query_start + 1..].split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (&url[query_start + 1..], None),
    };
    let mut params = Params::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if params.take(key, value)? {
            continue;
        }
        match (key, value) {
            ("protocol", "3" | "resp3") => params.resp3 = true,
            ("protocol", "2" | "resp2") => params.resp3 = false,
            ("protocol", _) => return Err("protocol is resp2 or resp3".to_string()),
            _ => {
                return Err(
                    "an unknown parameter (redis:// takes prefix, wait_replicas, \
                            wait_timeout and protocol)"
                        .to_string(),
                );
            }
        }
    }
    let mut out = url[..query_start].to_string();
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    Ok((out, params))
}

/// The scheme of Redis behind Sentinel.
const SENTINEL_SCHEME: &str = "redis-sentinel://";
/// The scheme of Redis Cluster.
const CLUSTER_SCHEME: &str = "redis-cluster://";

/// Whether `url` is a `redis-sentinel://` URL (schemes are case-insensitive).
pub(super) fn is_sentinel(url: &str) -> bool {
    has_scheme(url, SENTINEL_SCHEME)
}

const SENTINEL_EXPECTED: &str = "redis-sentinel://[user:password@]host:port[,host:port…]/\
                                 MASTER_NAME[?db=N&prefix=app1:&wait_replicas=N&wait_timeout=100ms\
                                 &sentinel_user=U&sentinel_password=P]";

const CLUSTER_EXPECTED: &str = "redis-cluster://[user:password@]host:port[,host:port…]\
                                [?prefix=app1:&wait_replicas=N&wait_timeout=100ms]";

/// The parameters of a `redis-sentinel://` URL that log in to the Sentinels themselves (their
/// `requirepass`, or an ACL user of theirs); the URL's user-info is the data nodes'.
const SENTINEL_USER: &str = "sentinel_user";
const SENTINEL_PASSWORD: &str = "sentinel_password";

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

/// Nodes as `(host, port)`.
type Nodes = Vec<(String, u16)>;

/// A URL with several hosts (`redis-sentinel://`, `redis-cluster://`) taken apart, the
/// parameters both take read into `config`'s fields; `other` reads the rest (false: unknown).
/// The user-info is the data nodes' login, read by redis-rs as for `redis://`.
fn parse_multi_host<'u>(
    url: &'u str,
    expected: &str,
    default_port: u16,
    mut other: impl FnMut(&mut RedisConfig, &str, &'u str) -> std::result::Result<bool, String>,
) -> Result<(Nodes, &'u str, RedisConfig)> {
    let bad = |why: &str| invalid(url, expected, why);
    let nodes = authority(url, "redis", expected)?.servers(default_port);
    let AroundHosts {
        userinfo,
        path,
        query,
    } = around_hosts(url).map_err(bad)?;
    let mut config = RedisConfig::new("", 0);
    let mut params = Params::default();
    for (key, value) in query {
        if !params.take(key, value).map_err(|why| bad(&why))?
            && !other(&mut config, key, value).map_err(|why| bad(&why))?
        {
            return Err(bad("an unknown parameter"));
        }
    }
    params.apply(&mut config).map_err(|why| bad(&why))?;
    if let Some(userinfo) = userinfo {
        // The address is a placeholder.
        let info = for_driver(&format!("redis://{userinfo}@127.0.0.1:6379/0"))
            .into_connection_info()
            .map_err(|e| bad(&format!("rejected by the Redis client ({:?})", e.kind())))?;
        login_of(&info, &mut config);
    }
    Ok((nodes, path, config))
}

/// Checks a `redis-sentinel://` URL. The user and password are the data nodes' (the master's
/// and replicas'); the Sentinels are asked with `sentinel_user` and `sentinel_password` when
/// the URL gives them (a Sentinel's `requirepass` is its own: Redis's docs set it apart from the
/// nodes' `requirepass`, which the Sentinels reach with `sentinel auth-pass`).
fn parse_sentinel(url: &str) -> Result<RedisConfig> {
    let bad = |why: &str| invalid(url, SENTINEL_EXPECTED, why);
    if !is_sentinel(url) {
        return Err(bad("not a redis-sentinel:// URL"));
    }
    let decode = |value: &str, what: &str| {
        percent_decode(value).ok_or_else(|| format!("a bad %-escape in {what}"))
    };
    let (sentinels, path, mut config) = parse_multi_host(
        url,
        SENTINEL_EXPECTED,
        SENTINEL_PORT,
        |config, key, value| {
            match key {
                SENTINEL_USER => config.sentinel_username = Some(decode(value, key)?),
                SENTINEL_PASSWORD => config.sentinel_password = Some(decode(value, key)?),
                "db" => {
                    config.db = value
                        .parse()
                        .map_err(|_| "db (the database) is not a number".to_string())?;
                }
                _ => return Ok(false),
            }
            Ok(true)
        },
    )
    .map_err(|e| {
        unknown_named(
            e,
            "db, prefix, wait_replicas, wait_timeout, sentinel_user and sentinel_password",
        )
    })?;
    let master_name = percent_decode(path.trim_start_matches('/'))
        .ok_or_else(|| bad("a bad %-escape in the master's name"))?;
    config.topology = RedisTopology::Sentinel {
        sentinels,
        master_name,
    };
    checked(url, SENTINEL_EXPECTED, config)
}

/// Checks a `redis-cluster://` URL.
fn parse_cluster(url: &str) -> Result<RedisConfig> {
    let bad = |why: &str| invalid(url, CLUSTER_EXPECTED, why);
    if !has_scheme(url, CLUSTER_SCHEME) {
        return Err(bad("not a redis-cluster:// URL"));
    }
    let (nodes, path, mut config) =
        parse_multi_host(url, CLUSTER_EXPECTED, DEFAULT_PORT, |_, _, _| Ok(false))
            .map_err(|e| unknown_named(e, "prefix, wait_replicas and wait_timeout"))?;
    if !matches!(path.trim_start_matches('/'), "" | "0") {
        return Err(bad(
            "a database after the hosts: a Redis Cluster has database 0 only",
        ));
    }
    config.topology = RedisTopology::Cluster { nodes };
    checked(url, CLUSTER_EXPECTED, config)
}

/// `e`, an unknown parameter's error, with the parameters the scheme takes named.
fn unknown_named(e: Error, known: &str) -> Error {
    let message = e.message().replacen(
        "an unknown parameter",
        &format!("an unknown parameter (this scheme takes {known})"),
        1,
    );
    Error::new(e.kind(), message).with_backend("redis")
}

/// What distlock adds to a connection the application brings
/// ([`RedisBackend::from_client`](super::RedisBackend::from_client) and the other
/// `from_…` constructors): the parameters of a URL that are distlock's, not the connection's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(default, deny_unknown_fields)
)]
pub struct RedisLockSettings {
    /// Put before every key and channel, or empty for none (as [`RedisConfig::prefix`]).
    pub prefix: String,
    /// Replicas that must acknowledge each take and renewal; 0: none.
    pub wait_replicas: u32,
    /// How long a take waits for them; required with `wait_replicas`.
    #[cfg_attr(
        feature = "serde",
        serde(with = "crate::config_serde::optional_duration")
    )]
    pub wait_timeout: Option<Duration>,
}

impl RedisLockSettings {
    /// No prefix, no replica acknowledgement.
    pub fn new() -> Self {
        Self::default()
    }

    setters! {
        /// Put before every key and channel.
        prefix(prefix: impl Into<String>) prefix = prefix.into();
    }

    /// `replicas` must acknowledge each take and renewal within `timeout`.
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_replicas = replicas;
        self.wait_timeout = Some(timeout);
        self
    }

    /// Checked; the replica acknowledgement they ask for.
    pub(super) fn check(&self, shown: &str) -> Result<Option<ReplicaAck>> {
        let checked = (if self.prefix.is_empty() {
            Ok(())
        } else {
            check_prefix(&self.prefix).map_err(str::to_string)
        })
        .and_then(|()| ReplicaAck::new(self.wait_replicas, self.wait_timeout));
        checked.map_err(|why| {
            Error::new(ErrorKind::InvalidInput, format!("{shown}: {why}")).with_backend("redis")
        })
    }
}

impl From<&RedisConfig> for RedisLockSettings {
    /// The settings of `config` that are distlock's own.
    fn from(config: &RedisConfig) -> Self {
        RedisLockSettings {
            prefix: config.prefix.clone(),
            wait_replicas: config.wait_replicas,
            wait_timeout: config.wait_timeout,
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn sentinels_of(c: &RedisConfig) -> (&[(String, u16)], &str) {
        match &c.topology {
            RedisTopology::Sentinel {
                sentinels,
                master_name,
            } => (sentinels, master_name),
            other => panic!("not behind Sentinel: {other:?}"),
        }
    }

    #[test]
    fn every_url_parameter_is_a_field() {
        let ms = Duration::from_millis;
        for (url, built) in [
            (
                "redis://app:s3cret@cache.example:6380/2?prefix=app1:&wait_replicas=2\
                 &wait_timeout=150ms&protocol=resp3",
                RedisConfig::new("cache.example", 6380)
                    .username("app")
                    .password("s3cret")
                    .db(2)
                    .prefix("app1:")
                    .wait_replicas(2, ms(150))
                    .resp3(true),
            ),
            ("redis://localhost", RedisConfig::new("localhost", 6379)),
            (
                "rediss://:pw@[::1]:6390/0#insecure",
                RedisConfig::new("::1", 6390)
                    .password("pw")
                    .tls(true)
                    .tls_insecure(true),
            ),
            (
                "redis-sentinel://u:p%40ss@h1:26380,h2/mymaster?db=3&prefix=a:\
                 &wait_replicas=1&wait_timeout=1s&sentinel_user=watch&sentinel_password=s%26cr",
                RedisConfig::sentinel([("h1", 26380), ("h2", 26379)], "mymaster")
                    .username("u")
                    .password("p@ss")
                    .db(3)
                    .prefix("a:")
                    .wait_replicas(1, ms(1000))
                    .sentinel_username("watch")
                    .sentinel_password("s&cr"),
            ),
            (
                "redis-cluster://:pw@n1:7000,[::1]?prefix=b:&wait_replicas=1&wait_timeout=50ms",
                RedisConfig::cluster([("n1", 7000), ("::1", 6379)])
                    .password("pw")
                    .prefix("b:")
                    .wait_replicas(1, ms(50)),
            ),
        ] {
            let parsed = RedisConfig::from_url(url).unwrap();
            assert_eq!(parsed, built, "{url}");
            // What a message shows parses back to the same settings, passwords aside.
            let shown = parsed.shown();
            assert!(
                !shown.contains("s3cret") && !shown.contains("s&cr"),
                "{shown}"
            );
        }
    }

    #[test]
    fn cluster_urls() {
        let c = parse_cluster("redis-cluster://127.0.0.1:7000,127.0.0.1:7001,h").unwrap();
        assert_eq!(
            c,
            RedisConfig::cluster([("127.0.0.1", 7000), ("127.0.0.1", 7001), ("h", 6379)])
        );
        let c = parse_cluster("REDIS-CLUSTER://app:p@s/s?w#rd@[::1]:7000/0?prefix=app1:").unwrap();
        let built = RedisConfig::cluster([("::1", 7000)])
            .username("app")
            .password("p@s/s?w#rd")
            .prefix("app1:");
        assert_eq!(c, built);
        assert_eq!(c.shown(), "redis-cluster://app:***@[::1]:7000?prefix=app1:");
        let c = parse_cluster("redis-cluster://:hunter2@h:1").unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
        assert!(c.check().unwrap().ack.is_none());
    }

    #[test]
    fn bad_cluster_urls_name_the_fault_and_hide_the_password() {
        for (url, fault) in [
            ("redis-cluster://u:hunter2@h:0", "port"),
            ("redis-cluster://u:hunter2@", "no host"),
            ("redis-cluster://u:hunter2@h:1,,h:2", "no host"),
            ("redis-cluster://u:hunter2@h:1#x", "fragment"),
            ("redis-cluster://u:hunter2@h:1?prefix=a{b}", "prefix"),
            (
                "redis-cluster://u:hunter2@h:1?wait_replicas=1&wait_timeout=0",
                "wait forever",
            ),
            ("redis://u:hunter2@h:1", "not a redis-cluster"),
        ] {
            let err = parse_cluster(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{url}");
            let shown = err.to_string();
            assert!(shown.contains(fault), "{url}: {shown}");
            assert!(!shown.contains("hunter2"), "{url}: {shown}");
        }
    }

    #[test]
    fn sentinel_urls() {
        let c = RedisConfig::from_url("redis-sentinel://127.0.0.1:6410,127.0.0.1:6411,h/distlock")
            .unwrap();
        assert_eq!(
            sentinels_of(&c),
            (
                &[
                    ("127.0.0.1".to_string(), 6410),
                    ("127.0.0.1".to_string(), 6411),
                    ("h".to_string(), 26379),
                ][..],
                "distlock"
            )
        );
        assert_eq!((c.db, c.password.as_deref()), (0, None));
        let c = parse_sentinel("REDIS-SENTINEL://app:p@s/s?w#rd@[::1]:26379/my%20master?db=3");
        assert_eq!(c.unwrap_err().kind(), ErrorKind::InvalidUrl, "a space");
        let c =
            parse_sentinel("redis-sentinel://app:p@s/s?w#rd@[::1]:26379/mymaster?db=3").unwrap();
        assert_eq!(sentinels_of(&c).0, &[("::1".to_string(), 26379)][..]);
        assert_eq!(c.db, 3);
        assert_eq!(c.username.as_deref(), Some("app"));
        assert_eq!(c.password.as_deref(), Some("p@s/s?w#rd"));
        assert_eq!(
            c.shown(),
            "redis-sentinel://app:***@[::1]:26379/mymaster?db=3"
        );
        let c = parse_sentinel("redis-sentinel://:hunter2@h:1/m").unwrap();
        assert_eq!(c.password.as_deref(), Some("hunter2"));
        assert!(!format!("{c:?}").contains("hunter2"));
        assert!(c.check().unwrap().sentinel_login.is_none());
    }

    #[test]
    fn the_sentinels_own_login() {
        let url = "redis-sentinel://:nodes@h:1/m?sentinel_password=s%26cr%3Dt&db=2";
        let c = parse_sentinel(url).unwrap();
        let login = c.check().unwrap().sentinel_login.unwrap();
        assert_eq!((login.user, login.password.as_str()), (None, "s&cr=t"));
        assert_eq!((c.password.as_deref(), c.db), (Some("nodes"), 2));
        assert!(!format!("{c:?}").contains("s&cr=t"), "{c:?}");
        assert!(!c.shown().contains("s&cr=t"));
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
    fn bad_sentinel_and_cluster_urls_name_the_fault_and_hide_the_password() {
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
            ("redis-cluster://u:hunter2@h:1/3", "database 0 only"),
            ("redis-cluster://u:hunter2@h:1?db=1", "unknown parameter"),
            (
                "redis-cluster://u:hunter2@h:1?wait_replicas=1",
                "wait_timeout",
            ),
        ] {
            let err = RedisConfig::from_url(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{url}");
            let shown = err.to_string();
            assert!(shown.contains(fault), "{url}: {shown}");
            assert!(!shown.contains("hunter2"), "{url}: {shown}");
        }
    }

    #[test]
    fn replica_acknowledgement_in_every_scheme() {
        let c = parse("redis://h:1/2?wait_replicas=2&prefix=a:&wait_timeout=150ms").unwrap();
        let ack = c.check().unwrap().ack.unwrap();
        assert_eq!(
            (ack.replicas, ack.timeout, c.prefix.as_str()),
            (2, Duration::from_millis(150), "a:")
        );
        assert!(
            parse("redis://h:1?wait_replicas=0")
                .unwrap()
                .check()
                .unwrap()
                .ack
                .is_none()
        );
        for url in [
            "redis://u:hunter2@h:1?wait_replicas=1",
            "redis://u:hunter2@h:1?wait_replicas=1&wait_timeout=0",
            "redis://u:hunter2@h:1?wait_timeout=1s",
            "redis://u:hunter2@h:1?wait_replicas=x&wait_timeout=1s",
            "redis-sentinel://u:hunter2@s:1/m?wait_replicas=2",
            "redis-sentinel://u:hunter2@s:1/m?wait_replicas=2&wait_timeout=never",
        ] {
            let err = RedisConfig::from_url(url).unwrap_err();
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
        assert_eq!(c.shown(), "redis://127.0.0.1:6379");
        let c = parse("rediss://app:s3cret@cache.example:6380/2").unwrap();
        assert!(c.tls);
        assert_eq!(c.shown(), "rediss://app:***@cache.example:6380/2");
        assert!(parse("redis://:pw@[::1]:6379/0").is_ok());
        let shown = format!("{:?}", parse("redis://u:hunter2@h:1").unwrap());
        assert!(!shown.contains("hunter2"), "{shown}");
        // A password with an unencoded '@', '/', '?', '#' and ':': all of it is the password.
        let c = parse("redis://u:p@s/s?w#o:rd@h:1/3").unwrap();
        assert_eq!(c.shown(), "redis://u:***@h:1/3");
        assert_eq!(
            c,
            RedisConfig::new("h", 1)
                .username("u")
                .password("p@s/s?w#o:rd")
                .db(3)
        );
        let c = parse("redis://u:p?x@h:1/3?prefix=app1:&protocol=resp2").unwrap();
        assert_eq!((c.prefix.as_str(), c.db, c.resp3), ("app1:", 3, false));
        assert_eq!(c.password.as_deref(), Some("p?x"));
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
            ("redis://u:hunter2@h:6379?protocol=4", "protocol"),
            ("redis://u:hunter2@h:6379?prefx=a:", "unknown parameter"),
        ] {
            let err = RedisConfig::from_url(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{url}");
            let shown = err.to_string();
            assert!(shown.contains(fault), "{url}: {shown}");
            assert!(!shown.contains("hunter2"), "{url}: {shown}");
        }
    }

    #[test]
    fn settings_a_topology_cannot_honour_are_refused() {
        for (config, fault) in [
            (RedisConfig::cluster([("h", 1)]).db(2), "database 0 only"),
            (RedisConfig::cluster([("h", 1)]).tls(true), "TLS"),
            (RedisConfig::sentinel([("h", 1)], "m").tls(true), "TLS"),
            (
                RedisConfig::new("h", 1).sentinel_password("hunter2"),
                "redis-sentinel",
            ),
            (RedisConfig::new("h", 1).tls_insecure(true), "without tls"),
            (RedisConfig::new("", 1), "no host"),
            (RedisConfig::cluster(Vec::<(String, u16)>::new()), "no host"),
            (RedisConfig::sentinel([("h", 1)], ""), "no master name"),
            (RedisConfig::new("h", 1).prefix("a b"), "prefix"),
        ] {
            let why = config.check().err().unwrap_or_default();
            assert!(why.contains(fault), "{config:?}: {why}");
            assert!(!format!("{config:?}").contains("hunter2"));
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn from_json() {
        let json = r#"{"topology": {"sentinel": {"sentinels": [["h1", 26380]],
            "master_name": "m"}}, "password": "pw", "db": 1, "wait_replicas": 1,
            "wait_timeout": "250ms", "sentinel_password": "sp"}"#;
        let config: RedisConfig = serde_json::from_str(json).unwrap();
        let built = RedisConfig::sentinel([("h1", 26380)], "m")
            .password("pw")
            .db(1)
            .wait_replicas(1, Duration::from_millis(250))
            .sentinel_password("sp");
        assert_eq!(config, built);
        let typo = r#"{"topology": {"server": {"host": "h", "port": 1}}, "pasword": "x"}"#;
        assert!(serde_json::from_str::<RedisConfig>(typo).is_err());
    }
}
