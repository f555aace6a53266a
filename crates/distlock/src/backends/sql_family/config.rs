//! The typed configuration of the PostgreSQL and MySQL stores ([`SqlConfig`], public as
//! `PostgresConfig` and `MySqlConfig`): what a `postgres://` or `mysql://` URL says, field by
//! field. [`SqlConfig::from_url`] is the URL parser the stores' `connect` uses, so every URL
//! parameter has a field; the driver gets the URL written back from the fields
//! ([`SqlConfig::driver_url`]), so a configuration made in code connects exactly as its URL would.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::error::{Error, ErrorKind, Result};
use crate::url::{after_hosts, authority, percent_decode, redact, userinfo_end};

/// The pool size when neither the URL nor the code sets one: enough for 16 busy tasks on one
/// client.
const DEFAULT_MAX_CONNECTIONS: u32 = 20;

/// TLS to the database server (`sslmode=` on PostgreSQL, `ssl-mode=` on MySQL; either
/// vocabulary is read for either store).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum SslMode {
    /// No TLS (`disable`, `DISABLED`).
    Disable,
    /// TLS only if the server insists (PostgreSQL's `allow`; MySQL has none and refuses it).
    Allow,
    /// TLS if the server offers it (`prefer`, `PREFERRED`; the drivers' default).
    Prefer,
    /// TLS, server certificate not checked (`require`, `REQUIRED`).
    Require,
    /// TLS, server certificate checked against the CA (`verify-ca`, `VERIFY_CA`).
    VerifyCa,
    /// TLS, certificate and host name checked (`verify-full`, `VERIFY_IDENTITY`).
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Option<SslMode> {
        Some(
            match value.to_ascii_lowercase().replace('_', "-").as_str() {
                "disable" | "disabled" => SslMode::Disable,
                "allow" => SslMode::Allow,
                "prefer" | "preferred" => SslMode::Prefer,
                "require" | "required" => SslMode::Require,
                "verify-ca" => SslMode::VerifyCa,
                "verify-full" | "verify-identity" => SslMode::VerifyFull,
                _ => return None,
            },
        )
    }
}

/// How a PostgreSQL or MySQL/MariaDB store connects: everything its URL can say, as fields.
///
/// Build it with [`SqlConfig::new`] and the setters, read it from a URL with
/// [`SqlConfig::from_url`], or (feature `serde`) deserialize it; then
/// `PostgresBackend::connect_config` or `MysqlBackend::connect_config`. The password never
/// appears in `Debug`.
///
/// | URL | field |
/// |---|---|
/// | `user:password@` | [`user`](Self::user), [`password`](Self::password) |
/// | `host:port` | [`host`](Self::host), [`port`](Self::port) |
/// | `/database` | [`database`](Self::database) |
/// | `lock=session` | [`session_locks`](Self::session_locks) |
/// | `max_connections=N` | [`max_connections`](Self::max_connections) |
/// | `sslmode=` / `ssl-mode=` | [`ssl_mode`](Self::ssl_mode) |
/// | `sslrootcert=` / `ssl-ca=` | [`ssl_root_cert`](Self::ssl_root_cert) |
/// | `sslcert=` / `ssl-cert=` | [`ssl_client_cert`](Self::ssl_client_cert) |
/// | `sslkey=` / `ssl-key=` | [`ssl_client_key`](Self::ssl_client_key) |
/// | any other (`application_name`, `options`, `charset`, …) | [`parameters`](Self::parameters), for the driver |
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct SqlConfig {
    /// The server's host name or IP address (an IPv6 address without brackets); empty: the
    /// driver's default (PostgreSQL: `PGHOST` or `localhost`).
    #[cfg_attr(feature = "serde", serde(default))]
    pub host: String,
    /// The server's port; `None`: the database's (5432, 3306).
    pub port: Option<u16>,
    /// The user to log in as.
    pub user: Option<String>,
    /// The user's password. Never shown by `Debug` or in errors.
    pub password: Option<String>,
    /// The database holding distlock's tables.
    pub database: Option<String>,
    /// Session locks (`pg_advisory_lock`, `GET_LOCK`) held by a connection, instead of lease
    /// rows (`lock=session`).
    #[cfg_attr(feature = "serde", serde(default))]
    pub session_locks: bool,
    /// The most connections distlock's pool opens (1-1000, default 20).
    #[cfg_attr(feature = "serde", serde(default = "default_max_connections"))]
    pub max_connections: u32,
    /// TLS; `None`: the driver's default (prefer).
    pub ssl_mode: Option<SslMode>,
    /// The CA certificate (PEM) the server's is checked against.
    pub ssl_root_cert: Option<PathBuf>,
    /// The client certificate (PEM), for servers that want one.
    pub ssl_client_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    pub ssl_client_key: Option<PathBuf>,
    /// The driver's other URL parameters, by name (`application_name`, `options`,
    /// `statement-cache-capacity`, `charset`, …), values not %-encoded. The driver checks them
    /// when connecting.
    #[cfg_attr(feature = "serde", serde(default))]
    pub parameters: BTreeMap<String, String>,
}

#[cfg(feature = "serde")]
fn default_max_connections() -> u32 {
    DEFAULT_MAX_CONNECTIONS
}

crate::config_debug::debug_without_secrets!(SqlConfig {
    host,
    port,
    user,
    password: secret,
    database,
    session_locks,
    max_connections,
    ssl_mode,
    ssl_root_cert,
    ssl_client_cert,
    ssl_client_key,
    parameters: keys,
});

impl SqlConfig {
    /// The server at `host`, its database's default port, no login, lease locks, a pool of 20.
    pub fn new(host: impl Into<String>) -> Self {
        SqlConfig {
            host: host.into(),
            port: None,
            user: None,
            password: None,
            database: None,
            session_locks: false,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            ssl_mode: None,
            ssl_root_cert: None,
            ssl_client_cert: None,
            ssl_client_key: None,
            parameters: BTreeMap::new(),
        }
    }

    /// Sets [`port`](Self::port).
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Sets [`user`](Self::user).
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Sets [`password`](Self::password).
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Sets [`database`](Self::database).
    pub fn database(mut self, database: impl Into<String>) -> Self {
        self.database = Some(database.into());
        self
    }

    /// Sets [`session_locks`](Self::session_locks).
    pub fn session_locks(mut self, on: bool) -> Self {
        self.session_locks = on;
        self
    }

    /// Sets [`max_connections`](Self::max_connections).
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n;
        self
    }

    /// Sets [`ssl_mode`](Self::ssl_mode).
    pub fn ssl_mode(mut self, mode: SslMode) -> Self {
        self.ssl_mode = Some(mode);
        self
    }

    /// Sets [`ssl_root_cert`](Self::ssl_root_cert).
    pub fn ssl_root_cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.ssl_root_cert = Some(path.into());
        self
    }

    /// Sets [`ssl_client_cert`](Self::ssl_client_cert) and
    /// [`ssl_client_key`](Self::ssl_client_key).
    pub fn ssl_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.ssl_client_cert = Some(cert.into());
        self.ssl_client_key = Some(key.into());
        self
    }

    /// Adds a driver parameter ([`parameters`](Self::parameters)).
    pub fn parameter(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.parameters.insert(name.into(), value.into());
        self
    }

    /// Reads `postgres://`, `postgresql://`, `mysql://` or `mariadb://` URLs:
    /// `scheme://[user[:password]@]host[:port][/database][?parameters]`.
    /// [`ErrorKind::InvalidUrl`] for anything else, the URL shown with its password masked.
    pub fn from_url(url: &str) -> Result<Self> {
        const SHAPE: &str = "postgres://user[:password]@host[:port]/database (or mysql://…)";
        let redacted = redact(url);
        let bad = |why: String| Error::new(ErrorKind::InvalidUrl, format!("{redacted:?}: {why}"));
        let Some((scheme, _)) = url.split_once("://") else {
            // Without "://" the password cannot be told apart from the rest: do not echo it.
            return Err(Error::new(
                ErrorKind::InvalidUrl,
                format!("expected {SHAPE}"),
            ));
        };
        if !["postgres", "postgresql", "mysql", "mariadb"]
            .iter()
            .any(|s| scheme.eq_ignore_ascii_case(s))
        {
            return Err(bad(format!(
                "not a PostgreSQL or MySQL URL; expected {SHAPE}"
            )));
        }
        let backend = if scheme.to_ascii_lowercase().starts_with("postgres") {
            "postgres"
        } else {
            "mysql"
        };
        let bad = |why: String| bad(why).with_backend(backend);
        let parts = after_hosts(url).map_err(|why| bad(why.to_string()))?;
        let mut config = SqlConfig::new("");
        // An empty host (`postgres:///db`, a local socket) is the driver's default.
        let rest = &url[scheme.len() + 3..];
        let hosts = &rest[userinfo_end(rest).map_or(0, |at| at + 1)..];
        if !hosts.is_empty() && !hosts.starts_with(['/', '?']) {
            let mut hosts = authority(url, backend, SHAPE)?.hosts;
            if hosts.len() > 1 {
                return Err(bad(
                    "one host only (the driver connects to one server)".into()
                ));
            }
            let host = hosts.remove(0);
            config.host = host
                .host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            config.port = host.port;
        }
        if let Some((user, password)) = parts.user {
            config.user = Some(user);
            config.password = (!password.is_empty()).then_some(password);
        }
        config.database = (!parts.path.is_empty()).then_some(parts.path);
        for (key, value) in parts.query {
            // The drivers read the query as a form: '+' is a space.
            let decoded = percent_decode(&value.replace('+', " "))
                .ok_or_else(|| bad(format!("a bad %-escape in the value of {key}=")))?;
            match key {
                "lock" => {
                    config.session_locks = match value {
                        "lease" => false,
                        "session" => true,
                        other => {
                            return Err(bad(format!(
                                "lock={other:?} is not a lock technique; use lock=lease \
                                 (default) or lock=session"
                            )));
                        }
                    }
                }
                "max_connections" => {
                    config.max_connections = value.parse().map_err(|_| {
                        bad(format!(
                            "max_connections={value:?} is not a number in 1..=1000"
                        ))
                    })?;
                }
                "sslmode" | "ssl-mode" => {
                    config.ssl_mode = Some(SslMode::parse(&decoded).ok_or_else(|| {
                        bad(format!(
                            "{key}={value:?} is not a TLS mode (disable, allow, prefer, require, \
                             verify-ca, verify-full; or MySQL's DISABLED … VERIFY_IDENTITY)"
                        ))
                    })?);
                }
                "sslrootcert" | "ssl-ca" | "ssl-root-cert" | "sslca" => {
                    config.ssl_root_cert = Some(decoded.into())
                }
                "sslcert" | "ssl-cert" => config.ssl_client_cert = Some(decoded.into()),
                "sslkey" | "ssl-key" => config.ssl_client_key = Some(decoded.into()),
                other => {
                    config.parameters.insert(other.to_string(), decoded);
                }
            }
        }
        config.check().map_err(|why| bad(why.to_string()))?;
        Ok(config)
    }

    /// What no store can use, as a message.
    fn check(&self) -> std::result::Result<(), &'static str> {
        if !(1..=1000).contains(&self.max_connections) {
            return Err("max_connections must be a number in 1..=1000");
        }
        if self.password.is_some() && self.user.is_none() {
            return Err("a password needs a user");
        }
        Ok(())
    }

    /// The URL the driver of `scheme` (`postgres`, `mysql`) reads: the fields written back, with
    /// that driver's names of the TLS parameters, distlock's own left out. Holds the password:
    /// never show it (show [`redact`] of it).
    pub(crate) fn driver_url(&self, scheme: &'static str, product: &str) -> Result<String> {
        self.check().map_err(|why| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("{product} configuration: {why}"),
            )
            .with_backend(scheme)
        })?;
        let postgres = scheme == "postgres";
        let mut url = format!("{scheme}://");
        if let Some(user) = &self.user {
            url.push_str(&encode(user));
            if let Some(password) = &self.password {
                url.push(':');
                url.push_str(&encode(password));
            }
            url.push('@');
        }
        if self.host.contains(':') {
            url.push_str(&format!("[{}]", self.host));
        } else {
            url.push_str(&encode(&self.host));
        }
        if let Some(port) = self.port {
            url.push_str(&format!(":{port}"));
        }
        if let Some(database) = &self.database {
            url.push('/');
            url.push_str(&encode(database));
        }
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(mode) = self.ssl_mode {
            let value = match (postgres, mode) {
                (true, SslMode::Disable) => "disable",
                (true, SslMode::Allow) => "allow",
                (true, SslMode::Prefer) => "prefer",
                (true, SslMode::Require) => "require",
                (true, SslMode::VerifyCa) => "verify-ca",
                (true, SslMode::VerifyFull) => "verify-full",
                (false, SslMode::Disable) => "DISABLED",
                (false, SslMode::Allow) => {
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        "MySQL has no ssl mode \"allow\": use SslMode::Prefer (TLS when the \
                         server offers it) or SslMode::Disable",
                    )
                    .with_backend(scheme));
                }
                (false, SslMode::Prefer) => "PREFERRED",
                (false, SslMode::Require) => "REQUIRED",
                (false, SslMode::VerifyCa) => "VERIFY_CA",
                (false, SslMode::VerifyFull) => "VERIFY_IDENTITY",
            };
            query.push((if postgres { "sslmode" } else { "ssl-mode" }, value.into()));
        }
        for (path, pg, my) in [
            (&self.ssl_root_cert, "sslrootcert", "ssl-ca"),
            (&self.ssl_client_cert, "sslcert", "ssl-cert"),
            (&self.ssl_client_key, "sslkey", "ssl-key"),
        ] {
            if let Some(path) = path {
                query.push((if postgres { pg } else { my }, path.display().to_string()));
            }
        }
        for (name, value) in &self.parameters {
            query.push((name, value.clone()));
        }
        for (i, (name, value)) in query.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&encode(name));
            url.push('=');
            url.push_str(&encode(value));
        }
        Ok(url)
    }
}

/// `text` %-encoded but for RFC 3986's unreserved characters, so a driver reads it back as it is.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_url_parameter_has_its_field() {
        let from_url = SqlConfig::from_url(
            "postgresql://app:p%40ss@db.example:6543/locks?lock=session&max_connections=7\
             &sslmode=verify-full&sslrootcert=/etc/ca.pem&sslcert=/c.pem&sslkey=/k.pem\
             &application_name=my+app",
        )
        .unwrap();
        let in_code = SqlConfig::new("db.example")
            .port(6543)
            .user("app")
            .password("p@ss")
            .database("locks")
            .session_locks(true)
            .max_connections(7)
            .ssl_mode(SslMode::VerifyFull)
            .ssl_root_cert("/etc/ca.pem")
            .ssl_client_cert("/c.pem", "/k.pem")
            .parameter("application_name", "my app");
        assert_eq!(from_url, in_code);
        let shown = format!("{from_url:?}");
        assert!(!shown.contains("p@ss"), "{shown}");

        let mysql = SqlConfig::from_url(
            "mariadb://root@[::1]:3307/db?ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem&charset=utf8mb4",
        )
        .unwrap();
        assert_eq!(
            mysql,
            SqlConfig::new("::1")
                .port(3307)
                .user("root")
                .database("db")
                .ssl_mode(SslMode::VerifyFull)
                .ssl_root_cert("/ca.pem")
                .parameter("charset", "utf8mb4")
        );
        assert_eq!(
            SqlConfig::from_url("postgres:///db").unwrap(),
            SqlConfig::new("").database("db")
        );
    }

    #[test]
    fn the_driver_reads_what_the_fields_say() {
        let c = SqlConfig::new("::1")
            .port(1)
            .user("u")
            .password("p@s/s?w")
            .database("d b")
            .ssl_mode(SslMode::VerifyCa)
            .parameter("options", "-c a=b");
        assert_eq!(
            c.driver_url("postgres", "PostgreSQL").unwrap(),
            "postgres://u:p%40s%2Fs%3Fw@[::1]:1/d%20b?sslmode=verify-ca&options=-c%20a%3Db"
        );
        assert!(
            c.driver_url("mysql", "MySQL")
                .unwrap()
                .ends_with("?ssl-mode=VERIFY_CA&options=-c%20a%3Db")
        );
        let allow = SqlConfig::new("h").ssl_mode(SslMode::Allow);
        let err = allow.driver_url("mysql", "MySQL").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.to_string().contains("Prefer"), "{err}");
        let err = SqlConfig::new("h")
            .max_connections(0)
            .driver_url("postgres", "PostgreSQL")
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    }

    #[test]
    fn bad_urls_are_typed_errors_without_the_password() {
        for url in [
            "postgres://u:hunter2@h/db?lock=nope",
            "postgres://u:hunter2@h/db?max_connections=0",
            "postgres://u:hunter2@h/db?sslmode=sometimes",
            "postgres://u:hunter2@h:notaport/db",
            "postgres://u:hunter2@a,b/db",
            "postgres:u:hunter2@h/db",
            "redis://u:hunter2@h/db",
        ] {
            let err = SqlConfig::from_url(url).err().unwrap();
            assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{url}");
            assert!(!format!("{err} {err:?}").contains("hunter2"), "{err}");
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn from_json() {
        let c: SqlConfig = serde_json::from_str(
            r#"{"host": "h", "port": 5432, "user": "u", "password": "pw", "database": "d",
                "ssl_mode": "verify-full", "parameters": {"application_name": "a"}}"#,
        )
        .unwrap();
        assert_eq!(
            c,
            SqlConfig::new("h")
                .port(5432)
                .user("u")
                .password("pw")
                .database("d")
                .ssl_mode(SslMode::VerifyFull)
                .parameter("application_name", "a")
        );
        assert!(serde_json::from_str::<SqlConfig>(r#"{"host": "h", "pasword": "x"}"#).is_err());
    }
}
