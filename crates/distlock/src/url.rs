//! One home for store URLs: the schemes distlock knows, the redacted form every message shows,
//! the authority (user, password, one or more `host:port`), and distlock's own query
//! parameters, split off before the rest goes to a driver. Backends' `config.rs` and the CLI
//! use these; nothing else takes a URL apart.

use std::path::PathBuf;

use crate::error::{Error, ErrorKind, Result};

/// A store distlock knows, by its URL scheme (built into this binary or not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scheme {
    /// `sqlite:PATH`: the embedded default.
    Sqlite,
    /// `redis://`, `rediss://` (TLS), `redis-sentinel://` (the master a set of Sentinels names),
    /// `redis-cluster://` (a Redis Cluster).
    Redis,
    /// `redlock://h1:p1,h2:p2,…`: Redlock over independent Redis masters.
    Redlock,
    /// `postgres://`, `postgresql://`.
    Postgres,
    /// `mysql://`, `mariadb://`.
    Mysql,
    /// `zk://h1:p1,…[/chroot]`.
    ZooKeeper,
    /// `etcd://`, `etcds://` (TLS).
    Etcd,
    /// `memcached://h1:p1[,h2:p2…]`.
    Memcached,
    /// `memory:`, `memory://NAME`: this process's memory, for unit tests.
    Memory,
    /// `s3://BUCKET[/PREFIX]`, `az://CONTAINER[/PREFIX]`: object storage (Amazon S3 and
    /// S3-compatibles, Azure Blob Storage), with no lock server.
    ObjectStore,
}

/// Every scheme's spellings.
const SPELLINGS: &[(&str, Scheme)] = &[
    ("sqlite", Scheme::Sqlite),
    ("redis", Scheme::Redis),
    ("rediss", Scheme::Redis),
    ("redis-sentinel", Scheme::Redis),
    ("redis-cluster", Scheme::Redis),
    ("redlock", Scheme::Redlock),
    ("postgres", Scheme::Postgres),
    ("postgresql", Scheme::Postgres),
    ("mysql", Scheme::Mysql),
    ("mariadb", Scheme::Mysql),
    ("zk", Scheme::ZooKeeper),
    ("etcd", Scheme::Etcd),
    ("etcds", Scheme::Etcd),
    ("memcached", Scheme::Memcached),
    ("memory", Scheme::Memory),
    ("s3", Scheme::ObjectStore),
    ("az", Scheme::ObjectStore),
];

impl Scheme {
    /// The scheme of `url`: [`ErrorKind::InvalidUrl`] when it has none or names no store.
    pub fn of(url: &str) -> Result<Scheme> {
        let Some((scheme, _)) = url.trim().split_once(':') else {
            return Err(Error::new(
                ErrorKind::InvalidUrl,
                format!(
                    "{:?} has no scheme; expected e.g. sqlite:./locks.db or redis://127.0.0.1:6379",
                    redact(url)
                ),
            ));
        };
        SPELLINGS
            .iter()
            .find(|(spelling, _)| spelling.eq_ignore_ascii_case(scheme))
            .map(|(_, s)| *s)
            .ok_or_else(|| {
                let known: Vec<&str> = SPELLINGS.iter().map(|(s, _)| *s).collect();
                Error::new(
                    ErrorKind::InvalidUrl,
                    format!(
                        "unknown scheme {scheme:?} in {:?}; known: {}",
                        redact(url),
                        known.join(", ")
                    ),
                )
            })
    }

    /// The backend's short name, as in errors and `DISTLOCK_SKIP`.
    pub fn backend(self) -> &'static str {
        match self {
            Scheme::Sqlite => "sqlite",
            Scheme::Redis => "redis",
            Scheme::Redlock => "redlock",
            Scheme::Postgres => "postgres",
            Scheme::Mysql => "mysql",
            Scheme::ZooKeeper => "zk",
            Scheme::Etcd => "etcd",
            Scheme::Memcached => "memcached",
            Scheme::Memory => "memory",
            Scheme::ObjectStore => "objectstore",
        }
    }

    /// The cargo feature of distlock that builds this store in.
    pub fn feature(self) -> &'static str {
        match self {
            Scheme::ZooKeeper => "zookeeper",
            Scheme::ObjectStore => "object-store",
            other => other.backend(),
        }
    }
}

/// distlock's own query parameters. [`split_parameters`] takes them off before a driver sees
/// the URL; [`redact`] shows their values.
pub const OWN_PARAMETERS: &[&str] = &["lock", "max_connections"];

/// The query parameters of the backends that read their own URLs (etcd's session `ttl`,
/// ZooKeeper's session `timeout`, Redlock's per-master timeouts, the Redis key `prefix`):
/// [`redact`] shows them, as a run's figures depend on them and they hold no secret.
const SHOWN_BACKEND_PARAMETERS: &[&str] = &[
    "ttl",
    "timeout",
    "connect_timeout",
    "response_timeout",
    "prefix",
    "endpoint",
    "region",
];

/// Drivers' query parameters whose values [`redact`] shows (with [`OWN_PARAMETERS`]): they
/// shape the connection and hold no secret.
/// Every other parameter's value is masked, so a secret under any name (`password`, `pass`,
/// `sslpassword`, `Password`, `pass%77ord`, a name a driver adds tomorrow) never shows.
const SHOWN_DRIVER_PARAMETERS: &[&str] = &[
    // sqlx (PostgreSQL, MySQL) and redis-rs.
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "sslca",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "application_name",
    "charset",
    "collation",
    "socket",
    "timezone",
    "time-zone",
    "protocol",
    "db",
];

/// Where the user-info of `rest` (a URL after its `scheme://`) ends: the index of its last `@`.
///
/// RFC 3986, and so every driver, ends the authority at the first `/`, `?` or `#`: a password
/// holding one of those and an `@` (`redis://:p@ss/w0rd@h:1`) would be read as host `ss`, path
/// `/w0rd@h:1`, and half of it shown. The URLs distlock takes have no use for an `@` after their
/// hosts (their paths are database numbers or names, chroots, prefixes), so the last `@` ends the
/// user-info, in [`redact`], [`authority`] and every backend, and [`for_driver`] encodes the
/// user-info so a driver reads the same. An `@` in a path or a query value is written `%40`.
pub(crate) fn userinfo_end(rest: &str) -> Option<usize> {
    rest.rfind('@')
}

/// Where `url`'s part after `scheme://` starts, if it has a scheme followed by `://` (a `://`
/// further on, in a query value, does not count).
fn after_scheme(url: &str) -> Option<usize> {
    let i = url.find("://")?;
    let scheme = &url[..i];
    let valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some(i + 3)
}

/// `url` as a driver must get it to read the user-info distlock reads (`userinfo_end`): the
/// `@`, `/`, `?` and `#` in the user-info %-encoded. Any other URL comes back as it is. Holds the
/// password: never show it.
pub fn for_driver(url: &str) -> String {
    let Some(start) = after_scheme(url) else {
        return url.to_string();
    };
    let Some(end) = userinfo_end(&url[start..]).map(|at| start + at) else {
        return url.to_string();
    };
    let mut out = String::with_capacity(url.len() + 8);
    out.push_str(&url[..start]);
    for c in url[start..end].chars() {
        match c {
            '@' => out.push_str("%40"),
            '/' => out.push_str("%2F"),
            '?' => out.push_str("%3F"),
            '#' => out.push_str("%23"),
            c => out.push(c),
        }
    }
    out.push_str(&url[end..]);
    out
}

/// `url` as messages and `Debug` may show it: the user-info password and the value of every
/// query parameter but the harmless ones (`lock`, `sslmode`, …) replaced by `***`, and any
/// fragment but `#insecure` too.
///
/// The user-info runs to the last `@` (see `userinfo_end`). When it holds a `/`, `?` or `#`
/// (an unencoded password may), it is masked whole, user included.
pub fn redact(url: &str) -> String {
    let (prefix, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => url.split_at(url.find(':').map_or(0, |i| i + 1)),
    };
    let (shown_userinfo, tail) = match userinfo_end(rest) {
        Some(at) if rest[..at].contains(['/', '?', '#']) => ("***".to_string(), &rest[at..]),
        Some(at) => {
            let userinfo = &rest[..at];
            let shown = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None => userinfo.to_string(),
            };
            (shown, &rest[at..])
        }
        None => (String::new(), rest),
    };
    let (tail, fragment) = match tail.split_once('#') {
        Some((tail, fragment)) => (tail, Some(fragment)),
        None => (tail, None),
    };
    let mut shown = format!("{prefix}{shown_userinfo}");
    match tail.split_once('?') {
        Some((path, query)) => {
            shown.push_str(path);
            shown.push('?');
            let pairs: Vec<String> = query.split('&').map(redact_parameter).collect();
            shown.push_str(&pairs.join("&"));
        }
        None => shown.push_str(tail),
    }
    match fragment {
        Some("insecure") => shown.push_str("#insecure"),
        Some(_) => shown.push_str("#***"),
        None => {}
    }
    shown
}

/// One `key=value` of a query string, its value masked unless the key is a shown one.
fn redact_parameter(pair: &str) -> String {
    let key = pair.split_once('=').map_or(pair, |(key, _)| key);
    let harmless = OWN_PARAMETERS
        .iter()
        .chain(SHOWN_DRIVER_PARAMETERS)
        .chain(SHOWN_BACKEND_PARAMETERS)
        .any(|shown| shown.eq_ignore_ascii_case(key));
    match pair.split_once('=') {
        _ if harmless || pair.is_empty() => pair.to_string(),
        Some((key, _)) => format!("{key}=***"),
        None => "***".to_string(),
    }
}

/// One `host[:port]` of a URL's authority.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostPort {
    /// A name, an IPv4 address, or an IPv6 literal in brackets (`[::1]`).
    pub host: String,
    /// The port, when given.
    pub port: Option<u16>,
}

/// The servers of `scheme://[user[:password]@]host[:port][,host[:port]…]/…` (several for
/// Redlock, ZooKeeper ensembles, etcd clusters). The user-info is left to the driver, which
/// gets the URL itself.
#[derive(Debug)]
#[non_exhaustive]
pub struct Authority {
    /// The servers, in the order given.
    pub hosts: Vec<HostPort>,
}

/// Parses the authority of `url` (which has `://`); `backend` and `expected` (the URL's shape)
/// go into errors. Errors show the URL redacted, and never quote the piece at fault: with an
/// unencoded `/`, `?` or `#` in a password, that piece may be part of it.
pub fn authority(url: &str, backend: &'static str, expected: &str) -> Result<Authority> {
    let invalid = |why: &str| {
        Error::new(
            ErrorKind::InvalidUrl,
            format!("{:?}: {why}; expected {expected}", redact(url)),
        )
        .with_backend(backend)
    };
    let rest = url
        .split_once("://")
        .map(|(_, rest)| rest)
        .ok_or_else(|| invalid("no \"://\" after the scheme"))?;
    let hosts = &rest[userinfo_end(rest).map_or(0, |at| at + 1)..];
    let hosts = &hosts[..hosts.find(['/', '?', '#']).unwrap_or(hosts.len())];
    let mut parsed = Vec::new();
    for one in hosts.split(',') {
        let (host, port) = match one.rsplit_once(':') {
            // An IPv6 literal without a port: "[::1]".
            Some(_) if one.ends_with(']') => (one, None),
            Some((host, port)) => (host, Some(port)),
            None => (one, None),
        };
        if host.is_empty() {
            return Err(invalid("no host"));
        }
        let port = match port {
            None => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| invalid("a port is not a number 1-65535"))?,
            ),
        };
        parsed.push(HostPort {
            host: host.to_string(),
            port,
        });
    }
    Ok(Authority { hosts: parsed })
}

/// `url` (which has `://`) with its servers, the `host[:port][,…]` after any user-info, replaced
/// by `hosts`: how `distlock torture` sends clients through its fault proxy. The rest, user-info
/// included, is kept as it is.
pub fn with_hosts(url: &str, hosts: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let hosts_start = userinfo_end(rest).map_or(0, |at| at + 1);
    let end = rest[hosts_start..]
        .find(['/', '?', '#'])
        .map_or(rest.len(), |i| hosts_start + i);
    Some(format!(
        "{scheme}://{}{hosts}{}",
        &rest[..hosts_start],
        &rest[end..]
    ))
}

/// A URL with distlock's own parameters ([`OWN_PARAMETERS`]) taken off: what they say, and the
/// URL the driver gets (everything else, in order).
#[non_exhaustive]
pub struct Split<'a> {
    /// distlock's parameters, as given.
    pub own: Vec<(&'a str, &'a str)>,
    /// The URL without them, its user-info as [`for_driver`] writes it. May hold the password:
    /// never show it.
    pub driver_url: String,
}

/// Splits distlock's parameters off `url`.
pub fn split_parameters(url: &str) -> Split<'_> {
    // The query starts at the first '?' after the user-info, which may hold one.
    let hosts_start = after_scheme(url).map_or(0, |start| {
        start + userinfo_end(&url[start..]).map_or(0, |at| at + 1)
    });
    let (base, query) = match url[hosts_start..].find('?') {
        Some(i) => (&url[..hosts_start + i], &url[hosts_start + i + 1..]),
        None => (url, ""),
    };
    let mut own = Vec::new();
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if OWN_PARAMETERS.contains(&key) {
            own.push((key, value));
        } else {
            kept.push(pair);
        }
    }
    let mut driver_url = for_driver(base);
    if !kept.is_empty() {
        driver_url.push('?');
        driver_url.push_str(&kept.join("&"));
    }
    Split { own, driver_url }
}

/// The file of `sqlite:PATH` or `sqlite://PATH` (`sqlite:///abs/path` for an absolute path):
/// [`ErrorKind::InvalidUrl`] for no path, or an in-memory database (which processes cannot share).
pub fn sqlite_path(url: &str) -> Result<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidUrl,
                format!("{:?} is not an sqlite: URL", redact(url)),
            )
        })?;
    let path = rest.split(['?', '#']).next().unwrap_or("");
    // `sqlite://user:password@/path` would otherwise name a relative file called
    // "user:password@" (and print the password in every error about it).
    if url.starts_with("sqlite://") && path.split('/').next().is_some_and(|a| a.contains('@')) {
        return Err(Error::new(
            ErrorKind::InvalidUrl,
            "an sqlite: URL takes a file path, no user or password: e.g. sqlite:///var/lib/app/locks.db",
        ));
    }
    if path.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidUrl,
            "sqlite: needs a file path, e.g. sqlite:./distlock.db",
        ));
    }
    if path == ":memory:" || path.starts_with("file::memory:") {
        return Err(Error::new(
            ErrorKind::InvalidUrl,
            "an in-memory SQLite database cannot be shared between processes; give a file path",
        ));
    }
    Ok(PathBuf::from(path))
}

/// The store a `memory:` URL names: `None` for `memory:` or `memory://` (a store of its own),
/// the name for `memory://NAME` (letters, digits, `-`, `_`, `.`; shared by every client in the
/// process that names it).
pub fn memory_store(url: &str) -> Result<Option<String>> {
    let invalid = |why: &str| {
        Error::new(
            ErrorKind::InvalidUrl,
            format!(
                "{:?}: {why}; expected memory: (a store of its own) or memory://NAME (the \
                 store of that name in this process)",
                redact(url)
            ),
        )
    };
    let rest = match url.split_at_checked("memory:".len()) {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("memory:") => rest,
        _ => return Err(invalid("not a memory: URL")),
    };
    if rest.is_empty() || rest == "//" {
        return Ok(None);
    }
    let Some(name) = rest.strip_prefix("//") else {
        return Err(invalid("a store's name follows \"//\""));
    };
    if name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        Ok(Some(name.to_string()))
    } else {
        Err(invalid(
            "a store's name is letters, digits, '-', '_' and '.' (the memory backend takes no \
             host, path or parameters)",
        ))
    }
}

/// A duration in a URL parameter or a typed configuration, read as the `distlock` command reads
/// one: humantime's forms (`10s`, `4000ms`, `1m`, `1h30m`), or whole seconds without a unit.
#[cfg_attr(
    not(any(
        feature = "zookeeper",
        feature = "redis",
        feature = "redlock",
        feature = "serde"
    )),
    allow(dead_code)
)]
pub(crate) fn parse_duration(value: &str) -> Option<std::time::Duration> {
    if let Ok(secs) = value.parse::<u64>() {
        return Some(std::time::Duration::from_secs(secs));
    }
    humantime::parse_duration(value).ok()
}

/// `%XX` escapes decoded; `None` for a broken escape or a result that is not UTF-8.
#[cfg_attr(
    not(any(
        feature = "etcd",
        feature = "zookeeper",
        feature = "memcached",
        feature = "redlock"
    )),
    allow(dead_code)
)]
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// What follows a URL's hosts, taken apart: the user and password (decoded), the path
/// (decoded, without its outer `/`s) and the query's `key=value` pairs (as written).
// Redlock passes the user-info on to redis-rs as written, so it does not read `user`.
#[cfg_attr(
    not(any(feature = "etcd", feature = "zookeeper", feature = "memcached")),
    allow(dead_code)
)]
pub(crate) struct AfterHosts<'a> {
    pub(crate) user: Option<(String, String)>,
    pub(crate) path: String,
    pub(crate) query: Vec<(&'a str, &'a str)>,
}

/// A multi-host URL, `scheme://[userinfo@]host[:port][,host[:port]…][/path][?query]`, taken
/// apart around its hosts ([`authority`] parses those): one reading for every store whose URL
/// names several servers (Sentinel, Cluster, Redlock, etcd, ZooKeeper, memcached).
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct AroundHosts<'a> {
    /// The user-info as written (still %-encoded), without its `@`.
    pub(crate) userinfo: Option<&'a str>,
    /// What follows the hosts up to `?`, leading `/` and all, as written.
    pub(crate) path: &'a str,
    /// The query's `key=value` pairs, in order (`key` alone reads as `key=`).
    pub(crate) query: Vec<(&'a str, &'a str)>,
}

/// Takes `url` apart around its hosts. A fragment (`#…`) is refused: no store has a use for
/// one, and silently dropping it could drop part of a misplaced password. The error says what
/// is wrong without quoting it (it may be part of a password).
#[cfg_attr(
    not(any(
        feature = "redis",
        feature = "etcd",
        feature = "zookeeper",
        feature = "memcached",
        feature = "redlock"
    )),
    allow(dead_code)
)]
pub(crate) fn around_hosts(url: &str) -> std::result::Result<AroundHosts<'_>, &'static str> {
    let rest = url
        .split_once("://")
        .map(|(_, rest)| rest)
        .ok_or("no \"://\" after the scheme")?;
    let userinfo = userinfo_end(rest).map(|at| &rest[..at]);
    let hosts_start = userinfo.map_or(0, |u| u.len() + 1);
    let authority_end = rest[hosts_start..]
        .find(['/', '?', '#'])
        .map_or(rest.len(), |i| hosts_start + i);
    let after = &rest[authority_end..];
    let (path, query) = after.split_once('?').unwrap_or((after, ""));
    if path.contains('#') || query.contains('#') {
        return Err("a fragment (#…) means nothing here");
    }
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
        .collect();
    Ok(AroundHosts {
        userinfo,
        path,
        query,
    })
}

impl Authority {
    /// Each server as `(host, port)`, `default_port` where none is given, an IPv6 literal
    /// without its brackets (as a client connects to it).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn servers(&self, default_port: u16) -> Vec<(String, u16)> {
        self.hosts
            .iter()
            .map(|h| {
                let host = h.host.trim_start_matches('[').trim_end_matches(']');
                (host.to_string(), h.port.unwrap_or(default_port))
            })
            .collect()
    }
}

/// [`around_hosts`] with the user and password %-decoded (a password needs a user) and the path
/// %-decoded without its slashes at either end.
#[cfg_attr(
    not(any(
        feature = "etcd",
        feature = "zookeeper",
        feature = "memcached",
        feature = "redlock"
    )),
    allow(dead_code)
)]
pub(crate) fn after_hosts(url: &str) -> std::result::Result<AfterHosts<'_>, &'static str> {
    let around = around_hosts(url)?;
    let user = match around.userinfo {
        None => None,
        Some(userinfo) => {
            let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            let user = percent_decode(user).ok_or("a bad %-escape in the user")?;
            let password = percent_decode(password).ok_or("a bad %-escape in the password")?;
            if user.is_empty() {
                return Err("a password without a user");
            }
            Some((user, password))
        }
    };
    let path = percent_decode(around.path.trim_matches('/')).ok_or("a bad %-escape in the path")?;
    Ok(AfterHosts {
        user,
        path,
        query: around.query,
    })
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn durations_read_as_the_command_line_reads_them() {
        use std::time::Duration;
        for (text, expected) in [
            ("10", Duration::from_secs(10)),
            ("10s", Duration::from_secs(10)),
            ("4000ms", Duration::from_millis(4000)),
            ("1m", Duration::from_secs(60)),
            ("1m30s", Duration::from_secs(90)),
            ("1h", Duration::from_secs(3600)),
        ] {
            assert_eq!(parse_duration(text), Some(expected), "{text}");
        }
        for bad in ["", "soon", "-1s", "1.5.2s", "10 parsecs"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn with_hosts_replaces_only_the_servers() {
        assert_eq!(
            with_hosts("redis://:pw@db.example:6379/2?x=1", "127.0.0.1:4000").as_deref(),
            Some("redis://:pw@127.0.0.1:4000/2?x=1")
        );
        assert_eq!(
            with_hosts("zk://a:1,b:2/chroot", "127.0.0.1:9").as_deref(),
            Some("zk://127.0.0.1:9/chroot")
        );
        assert_eq!(with_hosts("sqlite:x.db", "h:1"), None);
    }

    #[test]
    fn memory_stores() {
        assert_eq!(Scheme::of("memory:").unwrap(), Scheme::Memory);
        assert_eq!(memory_store("memory:").unwrap(), None);
        assert_eq!(memory_store("memory://").unwrap(), None);
        assert_eq!(
            memory_store("MEMORY://app-tests_1.a").unwrap().as_deref(),
            Some("app-tests_1.a")
        );
        for bad in [
            "memory:app",
            "memory://app/x",
            "memory://app?x=1",
            "memory://u:secret@app",
            "memoré:",
            "redis://h",
        ] {
            let err = memory_store(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{bad}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }

    #[test]
    fn sqlite_paths() {
        assert_eq!(sqlite_path("sqlite:a.db").unwrap(), PathBuf::from("a.db"));
        // A file name may hold '@'; a user-info part may not (it is no path, and a password).
        assert_eq!(
            sqlite_path("sqlite:./me@host.db").unwrap(),
            PathBuf::from("./me@host.db")
        );
        let err = sqlite_path("sqlite://app:hunter2@/no/such/dir/x.db").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidUrl);
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert_eq!(
            sqlite_path("sqlite://./a.db").unwrap(),
            PathBuf::from("./a.db")
        );
        assert_eq!(
            sqlite_path("sqlite:///tmp/a.db").unwrap(),
            PathBuf::from("/tmp/a.db")
        );
        assert_eq!(
            sqlite_path("sqlite:").unwrap_err().kind(),
            ErrorKind::InvalidUrl
        );
        assert_eq!(
            sqlite_path("sqlite::memory:").unwrap_err().kind(),
            ErrorKind::InvalidUrl
        );
    }

    #[test]
    fn redact_hides_user_info_passwords() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/x"),
            "postgres://app:***@db:5432/x"
        );
        assert_eq!(redact("redis://:pw@h:1"), "redis://:***@h:1");
        assert_eq!(redact("redis://h:6379/0"), "redis://h:6379/0");
        assert_eq!(redact("mysql://root@h/db"), "mysql://root@h/db");
        assert_eq!(redact("sqlite:./a.db"), "sqlite:./a.db");
        assert_eq!(redact("redis://u:p@ss@h"), "redis://u:***@h");
    }

    #[test]
    fn redact_keeps_harmless_parameters() {
        for url in [
            "postgres://app@db:5432/x?sslmode=require&lock=session&max_connections=5",
            "mysql://root@h/db?ssl-mode=REQUIRED&SSL-CA=/etc/ca.pem",
            "rediss://h:6380/0#insecure",
            "redis://h:6379/0?protocol=resp3",
            "postgres://h/db?",
            "zk://h:2181/locks?timeout=3s",
            "etcd://h:2379?ttl=3",
            "redlock://a:1,b:2,c:3?connect_timeout=50ms&response_timeout=100ms",
        ] {
            assert_eq!(redact(url), url);
        }
    }

    #[test]
    fn redact_hides_every_other_parameter_and_malformed_user_info() {
        for (url, shown) in [
            (
                "postgres://u@h:1/t?password=s3cret",
                "postgres://u@h:1/t?password=***",
            ),
            (
                "postgres://u@h/t?sslmode=require&sslpassword=s3cret&lock=session",
                "postgres://u@h/t?sslmode=require&sslpassword=***&lock=session",
            ),
            ("redis://h/0?PassWord=s3cret", "redis://h/0?PassWord=***"),
            (
                "redis://h/0?pass%77ord=s3cret",
                "redis://h/0?pass%77ord=***",
            ),
            (
                "mysql://h/db?ssl-key-password=s3cret",
                "mysql://h/db?ssl-key-password=***",
            ),
            (
                "redis://h?token=s3cret&auth=s3cret",
                "redis://h?token=***&auth=***",
            ),
            ("redis://h?s3cret", "redis://h?***"),
            (
                "sqlite:/tmp/a.db?password=s3cret",
                "sqlite:/tmp/a.db?password=***",
            ),
            ("rediss://h#s3cret", "rediss://h#***"),
            // An unencoded '/', '?' or '#' in a password.
            ("postgres://u:s3/cret@h/db", "postgres://***@h/db"),
            ("redis://u:s3?cret@h", "redis://***@h"),
            ("redis://u:s3#cret@h:1", "redis://***@h:1"),
            ("postgres:u:s3cret@h/db", "postgres:u:***@h/db"),
            // An unencoded '@' before a '/', '?' or '#' in a password: the user-info runs to the
            // last '@', not to the first '/'.
            ("redis://:p@ss/w0rd@h:1", "redis://***@h:1"),
            ("redis://u:p@s?s#w@rd@h:1/0", "redis://***@h:1/0"),
            (
                "postgres://u:a@b:c/d@h/db?sslmode=disable",
                "postgres://***@h/db?sslmode=disable",
            ),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn schemes() {
        assert_eq!(Scheme::of("sqlite:a.db").unwrap(), Scheme::Sqlite);
        assert_eq!(Scheme::of("REDISS://h").unwrap(), Scheme::Redis);
        assert_eq!(Scheme::of("mariadb://h/db").unwrap(), Scheme::Mysql);
        assert_eq!(Scheme::of("zk://h:2181/app").unwrap(), Scheme::ZooKeeper);
        let err = Scheme::of("ftp://u:hunter2@h").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidUrl);
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert_eq!(
            Scheme::of("nonsense").unwrap_err().kind(),
            ErrorKind::InvalidUrl
        );
    }

    #[test]
    fn authorities_with_one_or_many_hosts() {
        let a = authority("redlock://u:pw@h1:7001,h2:7002,[::1]:7003", "redlock", "").unwrap();
        let hosts: Vec<_> = a.hosts.iter().map(|h| (h.host.as_str(), h.port)).collect();
        assert_eq!(
            hosts,
            [
                ("h1", Some(7001)),
                ("h2", Some(7002)),
                ("[::1]", Some(7003))
            ]
        );
        let a = authority("zk://h1,h2/chroot", "zk", "").unwrap();
        assert_eq!(a.hosts.len(), 2);
        let a = authority("redis://[::1]/0", "redis", "").unwrap();
        assert_eq!(a.hosts[0].port, None);
        for bad in [
            "redis://h:0",
            "redis://h:x",
            "redlock://h1:1,,h2:2",
            "redis://u:s3cret@",
        ] {
            let err = authority(bad, "redis", "redis://host:port").unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{bad}");
            assert!(!err.to_string().contains("s3cret"), "{err}");
        }
    }

    /// The servers, user and password of a URL whose password holds an unencoded `@` with a `/`,
    /// `?`, `#` or `:`, read by every part that takes a URL apart as [`redact`] reads it.
    #[test]
    fn a_password_may_hold_at_signs_slashes_and_question_marks() {
        let url = "zk://u:p@s:s/w?r#d@h1:1,h2:2/chroot?timeout=3s";
        let hosts: Vec<_> = authority(url, "zk", "")
            .unwrap()
            .hosts
            .into_iter()
            .map(|h| (h.host, h.port))
            .collect();
        assert_eq!(
            hosts,
            [("h1".to_string(), Some(1)), ("h2".to_string(), Some(2))]
        );
        let parts = after_hosts(url).unwrap();
        assert_eq!(
            parts.user,
            Some(("u".to_string(), "p@s:s/w?r#d".to_string()))
        );
        assert_eq!(parts.path, "chroot");
        assert_eq!(parts.query, [("timeout", "3s")]);
        assert_eq!(
            with_hosts(url, "127.0.0.1:9").as_deref(),
            Some("zk://u:p@s:s/w?r#d@127.0.0.1:9/chroot?timeout=3s")
        );
        // What a driver (which ends the authority at the first '/', '?' or '#') gets.
        let s = split_parameters("postgres://u:p@s/s?lock=x#y@h/db?lock=session&sslmode=disable");
        assert_eq!(s.own, [("lock", "session")]);
        assert_eq!(
            s.driver_url,
            "postgres://u:p%40s%2Fs%3Flock=x%23y@h/db?sslmode=disable"
        );
        assert_eq!(
            for_driver("redis://:p@ss/w0rd@h:1/0"),
            "redis://:p%40ss%2Fw0rd@h:1/0"
        );
        assert_eq!(for_driver("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(for_driver("sqlite:a.db"), "sqlite:a.db");
    }

    #[test]
    fn own_parameters_are_split_off() {
        let s =
            split_parameters("postgres://u:pw@h/db?sslmode=require&lock=session&max_connections=4");
        assert_eq!(s.own, [("lock", "session"), ("max_connections", "4")]);
        assert_eq!(s.driver_url, "postgres://u:pw@h/db?sslmode=require");
        let s = split_parameters("mysql://h/db?lock=lease");
        assert_eq!(s.driver_url, "mysql://h/db");
    }
}
