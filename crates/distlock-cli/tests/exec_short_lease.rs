//! Issue #40: `distlock exec --lease 5s` works on etcd and ZooKeeper with their default URLs
//! (sessions of 10 s): the lock is held under a session of the lease's own length, so a
//! SIGKILLed holder's lock is free within the lease plus the store's granularity, and a lease
//! below the server's own minimum is refused (exit 64) naming that minimum.

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::BIN;

/// Slack on top of the lease: the store's granularity (ZooKeeper expires sessions by the tick,
/// 2 s on the shared ensemble; etcd checks for expired leases every 500 ms and counts whole
/// seconds) and starting the next process on a loaded machine. Well under the 10 s a default
/// session would have kept the lock.
const SLACK: Duration = Duration::from_secs(3);

/// The etcd and ZooKeeper stores, with their default URLs: the test URLs without the query
/// that shortens their sessions.
fn session_stores() -> Vec<(&'static str, String)> {
    common::servers("--lease 5s on a session store's default URL")
        .into_iter()
        .filter(|s| matches!(s.name, "zk" | "etcd"))
        .map(|s| {
            (
                s.name,
                s.url.split('?').next().unwrap_or(&s.url).to_string(),
            )
        })
        .collect()
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a process this test started.
    unsafe { libc::kill(pid as i32, sig) };
}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Starts `exec --url URL --lease 5s NAME -- sh -c '…'`, whose shell writes its pid to
/// `ready` and sleeps; returns once it has, with that pid.
fn hold(url: &str, name: &str, ready: &Path) -> (Child, u32) {
    let script = format!("echo $$ > {}; exec sleep 60", ready.display());
    let mut holder = Command::new(BIN)
        .args([
            "exec", "--url", url, "--lease", "5s", name, "--", "sh", "-c",
        ])
        .arg(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(ready)
            && let Ok(pid) = text.trim().parse()
        {
            return (holder, pid);
        }
        if let Ok(Some(status)) = holder.try_wait() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut holder.stderr.take().unwrap(), &mut stderr).ok();
            panic!("{url}: the holder exited with {status} before running: {stderr}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{url}: the holder did not run within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `exec --lease 5s -- true` runs and exits 0; a SIGKILLed `exec --lease 5s` holder keeps the
/// lock at first (a try finds it held: the lease is honoured) and frees it within 5 s + slack
/// (measured and printed).
#[test]
fn exec_lease_5s_on_default_urls_frees_a_killed_holders_lock_within_it() {
    for (store, url) in session_stores() {
        let name = format!("exec-test/short-lease/{store}/{}", unique());
        let ran = Command::new(BIN)
            .args(["exec", "--url", &url, "--lease", "5s", &name, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(code(&ran), 0, "{store}: exec --lease 5s -- true: {ran:?}");

        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let (mut holder, command_pid) = hold(&url, &name, &ready);
        // Past the first keep-alive of its session (a third of the lease).
        std::thread::sleep(Duration::from_millis(2500));
        signal(holder.id(), libc::SIGKILL);
        holder.wait().ok();
        let killed = Instant::now();
        let tried = Command::new(BIN)
            .args(["exec", "--url", &url, "--no-wait", &name, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(
            code(&tried),
            75,
            "{store}: the killed holder's lock was not found held at once (no lease kept?): \
             {tried:?}"
        );
        let next = Command::new(BIN)
            .args(["exec", "--url", &url, "--wait", "30s", &name, "--", "true"])
            .output()
            .unwrap();
        let waited = killed.elapsed();
        signal(command_pid, libc::SIGKILL);
        assert_eq!(code(&next), 0, "{store}: {next:?}");
        let bound = Duration::from_secs(5) + SLACK;
        eprintln!("{store}: a SIGKILLed `exec --lease 5s` holder's lock was free after {waited:?}");
        assert!(
            waited >= Duration::from_millis(2500),
            "{store}: free after {waited:?}, before a 5 s lease renewed 2.5 s before the kill \
             could end"
        );
        assert!(
            waited <= bound,
            "{store}: a killed holder's lock freed after {waited:?} (lease 5s, bound {bound:?})"
        );
    }
}

/// A lease below the server's own minimum (etcd: 2 s with its default election timeout; the
/// shared ensemble's minSessionTimeout: 2 s) is refused with exit 64, naming the minimum and
/// what sets it; the command does not run.
#[test]
fn exec_lease_below_the_servers_minimum_is_refused_naming_it() {
    for (store, url) in session_stores() {
        let name = format!("exec-test/below-minimum/{store}/{}", unique());
        let (lease, sets_it) = match store {
            "zk" => ("500ms", "minSessionTimeout"),
            _ => ("1s", "--election-timeout"),
        };
        let out = Command::new(BIN)
            .args([
                "exec", "--url", &url, "--lease", lease, &name, "--", "echo", "ran",
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(code(&out), 64, "{store}: {out:?}");
        assert!(out.stdout.is_empty(), "{store}: the command ran");
        assert!(
            stderr.contains(lease) && stderr.contains("2s") && stderr.contains(sets_it),
            "{store}: the refusal names the lease, the server's minimum and what sets it: {stderr}"
        );
    }
}
