//! Private PostgreSQL and MariaDB servers for the restart tests: a fresh data directory and a
//! free port each, so stopping them disturbs no one. Stopped (by their own pid) on drop.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A port nobody listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}; run scripts/services.sh"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what} did not come up within 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn answers(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// The PostgreSQL binaries' directory (Debian layout, newest version).
fn pg_bin() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed under /usr/lib/postgresql; run scripts/services.sh")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").exists())
        .collect();
    dirs.sort();
    dirs.pop().expect("a PostgreSQL bin directory")
}

/// A private PostgreSQL (trust auth, no fsync) that can be stopped and started again.
pub struct PrivatePostgres {
    dir: tempfile::TempDir,
    pub port: u16,
    running: bool,
}

impl PrivatePostgres {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        run(
            Command::new("chown")
                .args(["-R", "postgres"])
                .arg(dir.path()),
            "chown of the data dir",
        );
        run(
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(pg_bin().join("initdb"))
                .args(["-U", "postgres", "--auth=trust", "-D"])
                .arg(dir.path().join("data")),
            "initdb",
        );
        let mut pg = PrivatePostgres {
            dir,
            port: free_port(),
            running: false,
        };
        pg.resume();
        pg
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn pg_ctl(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"])
            .arg(pg_bin().join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(args)
            .stdout(Stdio::null());
        cmd
    }

    /// Starts the server (again), on the same port and data.
    pub fn resume(&mut self) {
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -c port={} -k {} -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log");
        run(
            &mut self.pg_ctl(&["-w", "-l", log.to_str().unwrap(), "-o", &opts, "start"]),
            "pg_ctl start",
        );
        self.running = true;
        let port = self.port;
        wait_until("the private PostgreSQL", || answers(port));
    }

    /// Stops the server (fast shutdown: sessions are ended, data is kept).
    pub fn stop(&mut self) {
        run(
            &mut self.pg_ctl(&["-w", "-m", "fast", "stop"]),
            "pg_ctl stop",
        );
        self.running = false;
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        if self.running {
            let _ = self.pg_ctl(&["-w", "-m", "immediate", "stop"]).status();
        }
    }
}

/// A private MariaDB that can be stopped and started again.
pub struct PrivateMariaDb {
    dir: tempfile::TempDir,
    pub port: u16,
    child: Option<std::process::Child>,
}

impl PrivateMariaDb {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        run(
            Command::new("mariadb-install-db")
                .args([
                    "--no-defaults",
                    "--user=root",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ])
                .arg(format!("--datadir={}", dir.path().join("data").display())),
            "mariadb-install-db",
        );
        let mut db = PrivateMariaDb {
            dir,
            port: free_port(),
            child: None,
        };
        db.resume();
        db
    }

    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/mysql", self.port)
    }

    pub fn resume(&mut self) {
        let d = self.dir.path();
        let child = Command::new("mariadbd")
            .args([
                "--no-defaults",
                "--user=root",
                "--bind-address=127.0.0.1",
                "--skip-log-bin",
            ])
            .arg(format!("--port={}", self.port))
            .arg(format!("--datadir={}", d.join("data").display()))
            .arg(format!("--socket={}", d.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", d.join("mysqld.pid").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd; run scripts/services.sh");
        self.child = Some(child);
        let port = self.port;
        wait_until("the private MariaDB", || answers(port));
    }

    /// Stops the server (SIGTERM: a clean shutdown that keeps the data) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateMariaDb {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
