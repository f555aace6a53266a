//! A private MariaDB: `mariadb-install-db` into a fresh directory, then `mariadbd` as our child.

use std::process::Command;

use super::{Launch, PrivateServer, accepts, free_port, run};
use crate::Failure;

/// Starts a private MariaDB (user root, no password) on a free port; its URL names the
/// database `mysql`. It keeps its data across a restart.
pub fn start_mariadb() -> Result<PrivateServer, Failure> {
    let dir = tempfile::tempdir()?;
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
    let port = free_port()?;
    let run_dir = dir.path().to_path_buf();
    PrivateServer::start(Launch {
        name: "MariaDB",
        dir,
        port,
        url: format!("mysql://root@127.0.0.1:{port}/mysql"),
        keeps_data: true,
        command: Box::new(move || {
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
        }),
        // mariadbd opens its port only once it takes queries.
        ready: accepts,
        stop_signal: libc::SIGTERM,
    })
}
