//! A private memcached as our child: it keeps nothing on disk, so a restart comes back empty.

use std::process::Command;

use super::{Launch, PrivateServer, fresh_dir_and_port};
use crate::Failure;

/// Starts a private memcached (64 MB, no UDP) on a free loopback port. It keeps nothing across
/// a stop and start: locks and fencing counters are gone after a restart, as with the shared
/// server of scripts/services.sh. Its URL is `memcached://127.0.0.1:PORT`.
pub fn start_memcached() -> Result<PrivateServer, Failure> {
    start(&["-m", "64"])
}

/// Starts a private memcached as [`start_memcached`] does, but with `megabytes` of memory and
/// `-M`: when its memory is full it answers `SERVER_ERROR out of memory` instead of evicting, so
/// a test can fill it (a few megabytes fill in well under a second).
pub fn start_memcached_without_evictions(megabytes: u32) -> Result<PrivateServer, Failure> {
    start(&["-M", "-m", &megabytes.to_string()])
}

// SIGTERM (the default) stops it: memcached closes its connections and exits with 0.
fn start(memory: &[&str]) -> Result<PrivateServer, Failure> {
    let (dir, port) = fresh_dir_and_port()?;
    let memory: Vec<String> = memory.iter().map(|a| a.to_string()).collect();
    let url = format!("memcached://127.0.0.1:{port}");
    Launch::new("memcached", (dir, port), url, move || {
        let mut command = Command::new("memcached");
        command
            .args(["-l", "127.0.0.1", "-U", "0", "-u", "root"])
            .args(&memory)
            .arg("-p")
            .arg(port.to_string());
        command
    })
    .start()
}
