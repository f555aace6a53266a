//! A private MariaDB: `mariadb-install-db` into a fresh directory, then `mariadbd` as our child.

use std::process::Command;

use std::io::Read;
use std::time::Duration;

use super::{Launch, PrivateServer, fresh_dir_and_port, run};
use crate::Failure;

/// Starts a private MariaDB (user root, no password) on a free port; its URL names the
/// database `mysql`. It keeps its data across a restart.
pub fn start_mariadb() -> Result<PrivateServer, Failure> {
    let (dir, port) = fresh_dir_and_port()?;
    let data = dir.path().join("data");
    // Its own temporary directory: with the default /tmp, a bootstrap beside another one (two
    // test binaries start private servers at once) failed on CI removing its temporary tables
    // ("Could not remove temporary table '/tmp/#sql-temptable-…', error: 2").
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp)?;
    run(
        Command::new("mariadb-install-db")
            .args([
                "--no-defaults",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display())),
        "mariadb-install-db",
    )?;
    let run_dir = dir.path().to_path_buf();
    let url = format!("mysql://root@127.0.0.1:{port}/mysql");
    Launch::new("MariaDB", (dir, port), url, move || {
        let mut command = Command::new("mariadbd");
        command
            .args([
                "--no-defaults",
                "--user=root",
                "--bind-address=127.0.0.1",
                "--skip-log-bin",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!(
                "--socket={}",
                run_dir.join("mysqld.sock").display()
            ))
            .arg(format!(
                "--pid-file={}",
                run_dir.join("mysqld.pid").display()
            ));
        command
    })
    .keeping_data(true)
    .ready_when(greets)
    .start()
}

/// Whether mariadbd on `port` sends its greeting: it listens (and a TCP connect succeeds) long
/// before it serves, and a SIGTERM in that window was lost. CI saw it: stopped right after its
/// port opened, a server never got past "Buffer pool(s) load completed", and shrugged off a
/// minute of SIGTERMs sent every second. The greeting is
/// written only once the server accepts connections for real, past that window.
fn greets(port: u16) -> bool {
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    if stream
        .set_read_timeout(Some(Duration::from_secs(1)))
        .is_err()
    {
        return false;
    }
    let mut first = [0u8; 1];
    matches!(stream.read(&mut first), Ok(1))
}
