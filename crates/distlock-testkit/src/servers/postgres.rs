//! A private PostgreSQL: `initdb` into a fresh directory, then `postgres` itself as our child
//! (run as the `postgres` user, which initdb and the server insist on when we are root).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Launch, PrivateServer, fresh_dir_and_port, run};
use crate::Failure;

/// Starts a private PostgreSQL (trust auth, no fsync) on a free port; its URL names the
/// database `postgres`. It keeps its data across a restart.
pub fn start_postgres() -> Result<PrivateServer, Failure> {
    let bin = pg_bin()?;
    let (uid, gid) = postgres_user()?;
    let (dir, port) = fresh_dir_and_port()?;
    // The server refuses to run as root and must own its data and socket directory.
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
    let data = dir.path().join("data");
    run(
        Command::new(bin.join("initdb"))
            .args(["-U", "postgres", "--auth=trust", "-D"])
            .arg(&data)
            .uid(uid)
            .gid(gid),
        "initdb",
    )?;
    let socket_dir = dir.path().to_path_buf();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    Launch::new("PostgreSQL", (dir, port), url, move || {
        let mut command = Command::new(bin.join("postgres"));
        command
            .arg("-D")
            .arg(&data)
            .args(["-c", "listen_addresses=127.0.0.1", "-c"])
            .arg(format!("port={port}"))
            .arg("-k")
            .arg(&socket_dir)
            .args(["-c", "fsync=off"])
            .uid(uid)
            .gid(gid);
        command
    })
    .keeping_data(true)
    .ready_when(is_ready)
    // SIGINT is the fast shutdown: it ends client sessions instead of waiting for them.
    .stopped_by(libc::SIGINT)
    .start()
}

/// Accepting sessions, not merely listening: during start-up the port is open but sessions
/// are refused ("the database system is starting up").
fn is_ready(port: u16) -> bool {
    let Ok(bin) = pg_bin() else { return false };
    Command::new(bin.join("pg_isready"))
        .args(["-q", "-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .status()
        .is_ok_and(|s| s.success())
}

/// The PostgreSQL binaries' directory (Debian layout, newest version).
fn pg_bin() -> Result<PathBuf, Failure> {
    let root = Path::new("/usr/lib/postgresql");
    let not_installed = |why: String| {
        Failure(format!(
            "PostgreSQL binaries not found under {} ({why}); run scripts/services.sh",
            root.display()
        ))
    };
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(|e| not_installed(e.to_string()))?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").exists())
        .collect();
    dirs.sort();
    dirs.pop().ok_or_else(|| not_installed("no version".into()))
}

/// The `postgres` user's uid and gid.
fn postgres_user() -> Result<(u32, u32), Failure> {
    // SAFETY: getpwnam with a NUL-terminated name; the record is read before any other call
    // that could overwrite it.
    let entry = unsafe { libc::getpwnam(c"postgres".as_ptr()) };
    if entry.is_null() {
        return Err(Failure(
            "no `postgres` user to run a private PostgreSQL as; run scripts/services.sh".into(),
        ));
    }
    // SAFETY: non-null, as checked.
    let entry = unsafe { &*entry };
    Ok((entry.pw_uid, entry.pw_gid))
}
