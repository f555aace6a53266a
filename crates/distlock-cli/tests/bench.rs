//! `distlock bench` end to end: the real binary, real child processes, real stores.

use std::process::Command;

mod common;

/// `distlock bench --url URL --duration 1s`, to add arguments to.
fn bench_command(url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_distlock"));
    command.args(["bench", "--url", url, "--duration", "1s"]);
    command
}

/// The JSON report of `command` (a [`bench_command`]), which must succeed.
fn report(command: &mut Command) -> serde_json::Value {
    let out = command
        .arg("--json")
        .output()
        .expect("running distlock bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "distlock bench {:?} failed: {}\n{stdout}",
        command.get_args().collect::<Vec<_>>(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// `command`'s report of `workload` with `workers` in each of `processes` processes (and
/// `extra` arguments), checked with [`check_report`].
fn checked(
    mut command: Command,
    workload: &str,
    (workers, processes): (u64, u64),
    extra: &[&str],
) -> serde_json::Value {
    let (w, p) = (workers.to_string(), processes.to_string());
    command
        .args(["--workload", workload, "--workers", &w, "--processes", &p])
        .args(extra);
    let r = report(&mut command);
    check_report(&r, workload, workers, processes);
    r
}

/// A fresh SQLite store's URL, in `dir`.
fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite:{}", dir.path().join("bench.db").display())
}

fn check_report(r: &serde_json::Value, workload: &str, workers: u64, processes: u64) {
    assert_eq!(r["workload"], workload, "{r}");
    assert_eq!(r["workers"], workers, "{r}");
    assert_eq!(r["processes"], processes, "{r}");
    assert_eq!(r["overlaps"], 0, "{r}");
    assert_eq!(r["token_order_violations"], 0, "{r}");
    assert_eq!(r["errors"], 0, "{r}");
    let cycles = r["cycles"].as_u64().unwrap();
    assert!(cycles > 0, "{r}");
    assert!(
        r["min_per_worker"].as_u64().unwrap() > 0,
        "a worker starved: {r}"
    );
    assert!(
        r["p50_us"].as_u64().unwrap() <= r["p99_us"].as_u64().unwrap(),
        "{r}"
    );
    for field in ["cycles_per_sec", "handoffs_per_sec", "seconds"] {
        assert!(r[field].as_f64().is_some(), "{field} missing: {r}");
    }
}

fn redis_url() -> Option<String> {
    if distlock_testkit::skipped("redis", "distlock bench against Redis") {
        return None;
    }
    let url = std::env::var("DISTLOCK_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string());
    let addr = url.trim_start_matches("redis://").trim_end_matches('/');
    if std::net::TcpStream::connect(addr).is_err() {
        panic!(
            "Redis not reachable at {addr}; run scripts/services.sh (or set DISTLOCK_SKIP=redis)"
        );
    }
    Some(url)
}

#[test]
fn sqlite_contended_over_processes() {
    let dir = tempfile::tempdir().unwrap();
    let r = checked(bench_command(&sqlite_url(&dir)), "contended", (4, 2), &[]);
    assert_eq!(r["backend"], "sqlite");
}

#[test]
fn sqlite_uncontended_has_no_handoffs() {
    let dir = tempfile::tempdir().unwrap();
    let r = checked(bench_command(&sqlite_url(&dir)), "uncontended", (2, 1), &[]);
    assert_eq!(r["handoffs_per_sec"], 0.0, "own names cannot hand off: {r}");
}

#[test]
fn redis_contended_lock_and_fair_lock() {
    let Some(url) = redis_url() else { return };
    let r = checked(bench_command(&url), "contended", (4, 2), &[]);
    assert_eq!(r["backend"], "redis");
    let r = checked(
        bench_command(&url),
        "contended",
        (4, 2),
        &["--kind", "fair"],
    );
    assert_eq!(r["kind"], "fair");
}

/// Over a Redis Cluster (the uncontended workload's names spread over the masters, and the
/// contended one hands one lock, on one master, from worker to worker) and behind Sentinel.
#[test]
fn redis_cluster_and_sentinel_uncontended_and_contended() {
    let stores = common::servers("distlock bench against a Redis Cluster and Sentinel");
    for store in stores
        .iter()
        .filter(|s| matches!(s.name, "redis-cluster" | "redis-sentinel"))
    {
        for workload in ["uncontended", "contended"] {
            let r = checked(bench_command(&store.url), workload, (4, 2), &[]);
            assert_eq!(r["backend"], "redis", "{}: {r}", store.name);
        }
    }
}

#[test]
fn bad_arguments_fail_cleanly() {
    let out = Command::new(env!("CARGO_BIN_EXE_distlock"))
        .args([
            "bench",
            "--url",
            "redis://u:hunter2@127.0.0.1:1",
            "--workload",
            "contended",
            "--duration",
            "1s",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert!(stderr.contains("redis"), "{stderr}");
    let out = Command::new(env!("CARGO_BIN_EXE_distlock"))
        .args([
            "bench",
            "--url",
            "sqlite:/tmp/x.db",
            "--workload",
            "contended",
            "--workers",
            "2",
            "--processes",
            "3",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn redis_over_tls_with_password() {
    if redis_url().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let certs = distlock_testkit::certs::make(dir.path()).unwrap_or_else(|e| panic!("{e:?}"));
    let server = distlock_testkit::servers::start_redis_tls(&certs, "tls-s3cret")
        .unwrap_or_else(|e| panic!("{e:?}"));
    let url = format!("rediss://:tls-s3cret@localhost:{}", server.port());
    // The test CA is trusted through SSL_CERT_FILE (read by rustls-native-certs), for the child
    // processes only.
    let mut trusting = bench_command(&url);
    trusting.env("SSL_CERT_FILE", &certs.ca);
    checked(trusting, "contended", (2, 2), &[]);
    // Without the CA the server's certificate is refused, and the password is never shown.
    let out = bench_command(&url)
        .args(["--workload", "contended"])
        .env_remove("SSL_CERT_FILE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "an untrusted certificate was accepted"
    );
    assert!(stderr.contains("certificate"), "{stderr}");
    assert!(!stderr.contains("tls-s3cret"), "{stderr}");
}

/// etcd: waiters queue in revision order (FIFO), so the contended run hands the lock on with
/// every release, with no overlap and tokens in order.
#[cfg(feature = "etcd")]
#[test]
fn etcd_contended_is_fifo_and_exclusive() {
    if distlock_testkit::skipped("etcd", "distlock bench against etcd") {
        return;
    }
    let url = std::env::var("DISTLOCK_ETCD_URL")
        .unwrap_or_else(|_| "etcd://127.0.0.1:2379?ttl=3".to_string());
    let r = checked(bench_command(&url), "contended", (4, 2), &[]);
    assert_eq!(r["backend"], "etcd");
}
