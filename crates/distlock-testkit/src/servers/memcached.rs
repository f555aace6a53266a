//! A private memcached as our child: it keeps nothing on disk, so a restart comes back empty.

use std::process::Command;

use super::{Launch, PrivateServer, accepts, free_port};
use crate::Failure;

/// Starts a private memcached (64 MB, no UDP) on a free loopback port. It keeps nothing across
/// a stop and start: locks and fencing counters are gone after a restart, as with the shared
/// server of scripts/services.sh. Its URL is `memcached://127.0.0.1:PORT`.
pub fn start_memcached() -> Result<PrivateServer, Failure> {
    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    PrivateServer::start(Launch {
        name: "memcached",
        dir,
        port,
        url: format!("memcached://127.0.0.1:{port}"),
        keeps_data: false,
        command: Box::new(move || {
            let mut command = Command::new("memcached");
            command
                .args(["-l", "127.0.0.1", "-U", "0", "-m", "64", "-u", "root", "-p"])
                .arg(port.to_string());
            command
        }),
        ready: accepts,
        // SIGTERM: memcached closes its connections and exits with 0.
        stop_signal: libc::SIGTERM,
    })
}
