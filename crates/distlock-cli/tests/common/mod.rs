//! What the CLI test files share: the binary, and the stores to run it against.

#![allow(dead_code)] // Each test file uses its own part of this module.

use std::io::{Read, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_distlock");

/// A store to run `distlock` against; an SQLite store lives in a directory removed on drop.
pub struct Store {
    /// The name `DISTLOCK_SKIP` uses: sqlite, redis, redis-sentinel, redis-cluster, redlock,
    /// postgres, mysql, etcd, zk, memcached, s3, az.
    pub name: &'static str,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

/// The server backends: (name in DISTLOCK_SKIP, URL variable, loopback default).
const SERVERS: &[(&str, &str, &str)] = &[
    ("redis", "DISTLOCK_REDIS_URL", "redis://127.0.0.1:6379"),
    (
        "redis-sentinel",
        "DISTLOCK_REDIS_SENTINEL_URL",
        "redis-sentinel://127.0.0.1:6410,127.0.0.1:6411,127.0.0.1:6412/distlock",
    ),
    (
        "redis-cluster",
        "DISTLOCK_REDIS_CLUSTER_URL",
        "redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
    ),
    (
        "redlock",
        "DISTLOCK_REDLOCK_URL",
        "redlock://127.0.0.1:6390,127.0.0.1:6391,127.0.0.1:6392,127.0.0.1:6393,127.0.0.1:6394",
    ),
    (
        "postgres",
        "DISTLOCK_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:5432/distlock_test",
    ),
    (
        "mysql",
        "DISTLOCK_MYSQL_URL",
        "mysql://root@127.0.0.1:3306/distlock_test",
    ),
    // A short session TTL: a killed holder's lock is free within seconds.
    #[cfg(feature = "etcd")]
    ("etcd", "DISTLOCK_ETCD_URL", "etcd://127.0.0.1:2379?ttl=3"),
    // A short session timeout, for the same reason.
    (
        "zk",
        "DISTLOCK_ZK_URL",
        "zk://127.0.0.1:2181/distlock-cli?timeout=3s",
    ),
    (
        "memcached",
        "DISTLOCK_MEMCACHED_URL",
        "memcached://127.0.0.1:11211",
    ),
    // The object stores of scripts/services.sh (`scripts/services.sh url s3|az`).
    (
        "s3",
        "DISTLOCK_S3_URL",
        "s3://distlock:distlock-secret@distlock/cli?endpoint=http://127.0.0.1:9000&region=us-east-1",
    ),
    (
        "az",
        "DISTLOCK_AZ_URL",
        "az://devstoreaccount1:Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq%2FK1SZFPTOtr%2FKBHBeksoGMGw%3D%3D@distlock/cli?endpoint=http://127.0.0.1:10000/devstoreaccount1",
    ),
];

fn skipped(name: &str, what: &str) -> bool {
    distlock_testkit::skipped(name, &format!("{what} on {name}"))
}

/// A fresh SQLite store.
pub fn sqlite() -> Store {
    let dir = tempfile::tempdir().expect("tempdir");
    Store {
        name: "sqlite",
        url: format!("sqlite:{}", dir.path().join("locks.db").display()),
        _dir: Some(dir),
    }
}

/// The server stores not listed in `DISTLOCK_SKIP` (each skip printed, naming `what`). A server
/// that is down makes the test using it fail, with a hint to run scripts/services.sh.
pub fn servers(what: &str) -> Vec<Store> {
    SERVERS
        .iter()
        .filter(|(name, _, _)| !skipped(name, what))
        .map(|&(name, var, default)| Store {
            name,
            url: std::env::var(var).unwrap_or_else(|_| default.to_string()),
            _dir: None,
        })
        .collect()
}

/// SQLite and every server store not skipped.
pub fn every_store(what: &str) -> Vec<Store> {
    let mut stores = vec![sqlite()];
    stores.extend(servers(what));
    stores
}

/// A string unique to this call, for lock names and file names.
pub fn unique() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}-{nanos}-{n}", std::process::id())
}

/// Whether process `pid` still runs (a zombie, dead but not yet reaped, does not).
pub fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may hold spaces.
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().chars().next()),
            Some(Some('Z' | 'X'))
        ),
        Err(_) => false,
    }
}

/// Polls `done` every 10 ms for up to `within`; true if it became true.
pub fn eventually(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = std::time::Instant::now();
    loop {
        if done() {
            return true;
        }
        if started.elapsed() >= within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `distlock ARGS…`, with no `DISTLOCK_URL` from the environment.
pub fn distlock(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args).env_remove("DISTLOCK_URL");
    command
}

/// Runs `distlock ARGS…` (as [`distlock`] makes it) to the end.
pub fn run(args: &[&str]) -> Output {
    distlock(args).output().expect("run distlock")
}

/// A plain HTTP/1.0 GET of `path` from `authority` (the server closes the connection after
/// answering): the whole response.
pub fn http_get(authority: &str, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(authority).expect("connect to serve");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n").expect("send request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read response");
    response
}

/// Starts `command` with its output captured, to be read with `wait_with_output`.
pub fn spawn_captured(command: &mut Command) -> Child {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run distlock")
}
