//! A private redis-server as our child, with or without persistence.

use std::process::Command;

use super::{Launch, PrivateServer, accepts, free_port};
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
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let appendonly = match persistence {
        Persistence::None => "no",
        Persistence::AppendOnly => "yes",
    };
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let data = dir.path().to_path_buf();
    PrivateServer::start(Launch {
        name: "Redis",
        dir,
        port,
        url: format!("redis://127.0.0.1:{port}"),
        keeps_data: persistence == Persistence::AppendOnly,
        command: Box::new(move || {
            let mut command = Command::new("redis-server");
            command
                .args(["--bind", "127.0.0.1", "--port"])
                .arg(port.to_string())
                .args(["--save", "", "--appendfsync", "always", "--appendonly"])
                .arg(appendonly)
                .arg("--dir")
                .arg(&data)
                .args(&extra);
            command
        }),
        ready: accepts,
        // Without persistence SIGTERM saves nothing (`--save ""`); with it, it syncs the AOF.
        stop_signal: libc::SIGTERM,
    })
}
