//! A private redis-server as our child, with or without persistence; every private Redis (a
//! Redlock master, a Sentinel group's nodes and Sentinels, a cluster's nodes) starts here.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

use super::{Launch, PrivateServer, fresh_dir_and_port};
use crate::Failure;

/// What a private Redis keeps across a stop and start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// Nothing (`--save "" --appendonly no`, as scripts/services.sh runs the shared server): it
    /// comes back empty, fencing counters included.
    None,
    /// Every write, in an append-only file synced at once (`--appendfsync always`).
    AppendOnly,
}

/// Starts a private redis-server on a free port that keeps what `persistence` says.
pub fn start_redis(persistence: Persistence) -> Result<PrivateServer, Failure> {
    start_redis_with_args(persistence, &[])
}

/// [`start_redis`] with `extra` configuration arguments (`--user …` for an ACL); they apply
/// again when it is started again.
pub fn start_redis_with_args(
    persistence: Persistence,
    extra: &[&str],
) -> Result<PrivateServer, Failure> {
    let appendonly = match persistence {
        Persistence::None => "no",
        Persistence::AppendOnly => "yes",
    };
    let mut args = vec![
        "--save",
        "",
        "--appendfsync",
        "always",
        "--appendonly",
        appendonly,
    ];
    args.extend(extra);
    // Without persistence SIGTERM saves nothing (`--save ""`); with it, it syncs the AOF.
    redis_server("Redis", fresh_dir_and_port()?, None, args)
        .keeping_data(persistence == Persistence::AppendOnly)
        .start()
}

/// Starts a private redis-server that serves clients over TLS only (no plain port), with
/// `certs`' server certificate, not asking clients for one, and `password` as its
/// `requirepass`. Its port is the TLS port.
pub fn start_redis_tls(
    certs: &crate::certs::TestCerts,
    password: &str,
) -> Result<PrivateServer, Failure> {
    let at = fresh_dir_and_port()?;
    let tls_port = at.1.to_string();
    let mut args: Vec<OsString> = ["--save", "", "--appendonly", "no", "--port", "0"]
        .into_iter()
        .chain(["--tls-port", &tls_port, "--tls-auth-clients", "no"])
        .chain(["--requirepass", password])
        .map(OsString::from)
        .collect();
    args.extend(certs.server_args(["--tls-cert-file", "--tls-key-file", "--tls-ca-cert-file"]));
    redis_server("TLS Redis", at, None, args).start()
}

/// The private redis-server `name` on the loopback port and data directory `at`, reading the
/// configuration file `config` if any, told its address and directory, then configured by
/// `args` (which may override them: `--port 0` for no plain port).
pub(crate) fn redis_server(
    name: &'static str,
    at: (tempfile::TempDir, u16),
    config: Option<PathBuf>,
    args: impl IntoIterator<Item = impl Into<OsString>>,
) -> Launch {
    let port = at.1;
    let data = at.0.path().to_path_buf();
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    Launch::new(name, at, format!("redis://127.0.0.1:{port}"), move || {
        let mut command = Command::new("redis-server");
        command
            .args(&config)
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .arg("--dir")
            .arg(&data)
            .args(&args);
        command
    })
}
