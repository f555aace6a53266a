//! `distlock status` and `distlock release --force` end to end, on every store: a real
//! `distlock exec` holds a lock; status names its pid and fencing token; a forced release
//! removes it, the holder's command is stopped (exit 76), and the lock shows free.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, Store};

fn distlock(store: &Store, args: &[&str]) -> Output {
    common::distlock(args)
        .arg("--url")
        .arg(&store.url)
        .output()
        .expect("run distlock")
}

/// Fails unless `out` exited with `code`; `what` names the run.
fn assert_exit(out: &Output, code: i32, what: &str) {
    assert_eq!(out.status.code(), Some(code), "{what}:\n{}", text(out));
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn wait_for_token(path: &Path) -> u64 {
    let started = Instant::now();
    loop {
        if let Ok(token) = std::fs::read_to_string(path)
            && let Ok(token) = token.trim().parse()
        {
            return token;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the holder never started ({} missing)",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn status_then_force_release(store: &Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = format!("cli-status/{}", common::unique());
    let ready = dir.path().join("token");
    let script = format!(
        "echo $DISTLOCK_FENCING_TOKEN > {}; sleep 60",
        ready.display()
    );
    // ZooKeeper and etcd refuse a lease shorter than their sessions (the URLs' 3 s).
    let lease = if matches!(store.name, "zk" | "etcd") {
        "3s"
    } else {
        "1s"
    };
    let mut holder = Command::new(BIN)
        .args(["exec", "--lease", lease, "--url", &store.url, &name])
        .args(["--", "sh", "-c", &script])
        .env_remove("DISTLOCK_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn distlock exec");
    let token = wait_for_token(&ready);
    let pid = holder.id();
    let on = store.name;

    let table = distlock(store, &["status", &name]);
    let shown = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.status.success()
            && shown.contains(&format!("pid {pid} "))
            && shown.contains(&token.to_string()),
        "{on}: status does not show pid {pid} and token {token}:\n{}",
        text(&table)
    );
    let json = distlock(store, &["status", "--json", "--prefix", "cli-status/"]);
    let locks: serde_json::Value = serde_json::from_slice(&json.stdout)
        .unwrap_or_else(|e| panic!("{on}: status --json is not JSON ({e}):\n{}", text(&json)));
    let ours = locks
        .as_array()
        .and_then(|all| all.iter().find(|l| l["name"] == name.as_str()))
        .unwrap_or_else(|| {
            panic!(
                "{on}: {name} missing from status --prefix:\n{}",
                text(&json)
            )
        });
    assert_eq!(ours["holdings"][0]["token"], token, "{on}: {ours}");
    assert_eq!(ours["holdings"][0]["holder"]["pid"], pid, "{on}: {ours}");

    let refused = distlock(store, &["release", &name]);
    assert_exit(&refused, 64, &format!("{on}: release without --force"));
    let forced = distlock(store, &["release", "--force", &name]);
    let said = String::from_utf8_lossy(&forced.stdout);
    assert!(
        forced.status.success() && said.contains(&format!("token {token}")),
        "{on}: release --force did not report removing token {token}:\n{}",
        text(&forced)
    );
    // The holder's next renewal (a third of its 1 s lease) or its session's end tells it.
    let started = Instant::now();
    let code = loop {
        if let Some(status) = holder.try_wait().expect("wait for the holder") {
            break status.code();
        }
        if started.elapsed() > Duration::from_secs(15) {
            let _ = holder.kill();
            panic!("{on}: the forced-out holder's command still ran 15 s later");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(76), "{on}: the forced-out holder's exit status");
    let after = distlock(store, &["status", &name]);
    assert_exit(&after, 1, &format!("{on}: status after the forced release"));
}

#[test]
fn status_and_force_release_on_every_store() {
    for store in common::every_store("status and release --force") {
        status_then_force_release(&store);
    }
}

#[test]
fn bad_input_is_a_usage_error() {
    let store = common::sqlite();
    for args in [
        &["status"][..],
        &["status", ""],
        &["release", "--force", "--kind", "queue", "x"],
        &["release", "--force", ""],
    ] {
        let out = distlock(&store, args);
        assert_exit(&out, 64, &format!("{args:?}"));
    }
}

/// A Redis that may evict lock keys (`maxmemory 2mb`, `allkeys-lru`, with a password) is named
/// in one `distlock: warning:` line on stderr, with its policy and the remedy and without the
/// password, in the table form and with --json, whose stdout stays the array of locks; a
/// Redis with the defaults gives no warning.
#[test]
fn an_evicting_redis_is_warned_about() {
    use distlock_testkit::servers::{Persistence, start_redis_with_args};
    let password = "evict-s3cret";
    let evicting = start_redis_with_args(
        Persistence::None,
        &[
            "--maxmemory",
            "2mb",
            "--maxmemory-policy",
            "allkeys-lru",
            "--requirepass",
            password,
        ],
    )
    .unwrap_or_else(|f| panic!("starting a private redis-server: {}", f.0));
    let plain = start_redis_with_args(Persistence::None, &[])
        .unwrap_or_else(|f| panic!("starting a private redis-server: {}", f.0));
    let evicting_url = format!("redis://:{password}@127.0.0.1:{}", evicting.port());
    let plain_url = format!("redis://127.0.0.1:{}", plain.port());
    for json in [false, true] {
        let run = |url: &str| {
            let mut args = vec!["status", "--prefix", "cli-evict/", "--url", url];
            if json {
                args.push("--json");
            }
            let out = Command::new(BIN)
                .args(&args)
                .env_remove("DISTLOCK_URL")
                .output()
                .expect("run distlock");
            assert!(out.status.success(), "{args:?}:\n{}", text(&out));
            if json {
                let locks: serde_json::Value = serde_json::from_slice(&out.stdout)
                    .unwrap_or_else(|e| panic!("status --json is not JSON ({e}):\n{}", text(&out)));
                assert_eq!(locks, serde_json::json!([]), "{}", text(&out));
            }
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            let warnings: Vec<String> = stderr
                .lines()
                .filter(|line| line.starts_with("distlock: warning: "))
                .map(str::to_string)
                .collect();
            (warnings, stderr)
        };
        let (warnings, stderr) = run(&evicting_url);
        assert_eq!(warnings.len(), 1, "json {json}: {stderr}");
        for part in [
            format!("127.0.0.1:{}", evicting.port()),
            "allkeys-lru".into(),
            "maxmemory-policy noeviction".into(),
        ] {
            assert!(
                warnings[0].contains(&part),
                "json {json}: {part:?} missing: {stderr}"
            );
        }
        assert!(
            !stderr.contains(password),
            "the password is shown: {stderr}"
        );
        let (warnings, stderr) = run(&plain_url);
        assert!(warnings.is_empty(), "a default Redis warns: {stderr}");
    }
}
