//! `distlock exec` end to end: the real binary, real processes, an SQLite file per test and the
//! real servers where a test says so.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::BIN;

struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        Scratch {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn url(&self) -> String {
        format!("sqlite:{}", self.dir.path().join("locks.db").display())
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn exec(&self, args: &[&str]) -> Command {
        exec_on(&self.url(), args)
    }

    fn run(&self, args: &[&str]) -> Output {
        self.exec(args).output().expect("run distlock")
    }

    /// [`spawn_holder`](Self::spawn_holder), answering the holder and its command's pid.
    fn spawn_holder_pid(&self, extra: &[&str], then: &str) -> (Child, u32) {
        let (holder, ready) = self.spawn_holder(extra, then);
        (holder, number_in(&ready))
    }

    /// Starts a holder whose command writes its shell's pid to `ready` and then runs `then`.
    fn spawn_holder(&self, extra: &[&str], then: &str) -> (Child, PathBuf) {
        let ready = self.path(&format!("ready-{}", rand_suffix()));
        let script = format!("echo $$ > {}; {then}", ready.display());
        let mut args: Vec<&str> = extra.to_vec();
        args.extend(["job", "--", "sh", "-c", &script]);
        let child = self
            .exec(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn holder");
        wait_for_file(&ready);
        (child, ready)
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The number written in the file at `path` (a pid, a value).
fn number_in<T: std::str::FromStr>(path: &Path) -> T {
    let text = std::fs::read_to_string(path).unwrap();
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{} holds {text:?}, not a number", path.display()))
}

fn wait_for_file(path: &Path) {
    let started = Instant::now();
    while !path.exists()
        || std::fs::read_to_string(path)
            .unwrap_or_default()
            .trim()
            .is_empty()
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Checks that distlock ended with `want` without running COMMAND; returns its stderr.
fn ended_without_running(out: &Output, want: i32, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(code(out), want, "{what}: {stderr}");
    assert!(out.stdout.is_empty(), "{what}: the command ran");
    stderr
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a process this test started.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

fn wait_with_timeout(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        assert!(
            started.elapsed() < within,
            "process still running after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn exit_status_is_the_commands_own_and_the_lock_is_released() {
    let s = Scratch::new();
    let out = s.run(&["job", "--", "sh", "-c", "exit 7"]);
    assert_eq!(code(&out), 7);
    let out = s.run(&["--no-wait", "job", "--", "true"]);
    assert_eq!(
        code(&out),
        0,
        "the lock stayed held after a failing command"
    );
}

#[test]
fn command_sees_lock_name_and_increasing_fencing_tokens() {
    let s = Scratch::new();
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let out = s.run(&[
            "build/nightly",
            "--",
            "sh",
            "-c",
            "echo \"$DISTLOCK_LOCK_NAME $DISTLOCK_FENCING_TOKEN\"",
        ]);
        assert_eq!(code(&out), 0);
        let line = String::from_utf8(out.stdout).unwrap();
        let (name, token) = line.trim().split_once(' ').expect("two words");
        assert_eq!(name, "build/nightly");
        tokens.push(token.parse::<u64>().expect("a numeric token"));
    }
    assert!(tokens.windows(2).all(|w| w[1] > w[0]), "tokens {tokens:?}");
}

#[test]
fn lock_not_obtained_exits_75_with_one_line() {
    let s = Scratch::new();
    let (mut holder, _) = s.spawn_holder(&[], "sleep 30");
    let out = s.run(&["--no-wait", "job", "--", "echo", "ran"]);
    assert_eq!(code(&out), 75);
    assert!(out.stdout.is_empty(), "the command ran without the lock");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "stderr: {stderr}");

    let started = Instant::now();
    let out = s.run(&["--wait", "300ms", "job", "--", "echo", "ran"]);
    assert_eq!(code(&out), 75);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(out.stdout.is_empty());
    holder.kill().ok();
    holder.wait().ok();
}

#[test]
fn concurrent_invocations_exclude_each_other() {
    let s = Scratch::new();
    let counter = s.path("counter");
    let script = format!(
        "v=$(cat {c} 2>/dev/null || echo 0); sleep 0.01; echo $((v+1)) > {c}",
        c = counter.display()
    );
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let url = s.url();
            let script = script.clone();
            std::thread::spawn(move || {
                for _ in 0..10 {
                    let status = Command::new(BIN)
                        .args(["exec", "--url", &url, "counter", "--", "sh", "-c", &script])
                        .status()
                        .expect("run");
                    assert!(status.success());
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let value: u32 = std::fs::read_to_string(&counter)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(value, 40, "lost updates between invocations");
}

#[test]
fn killed_holder_frees_within_lease_plus_a_second() {
    let s = Scratch::new();
    let (mut holder, command_pid) = s.spawn_holder_pid(&["--lease", "1s"], "sleep 30");
    signal(holder.id(), libc::SIGKILL);
    holder.wait().ok();
    let killed = Instant::now();
    let out = s.run(&["--wait", "10s", "job", "--", "true"]);
    let waited = killed.elapsed();
    signal(command_pid, libc::SIGKILL);
    assert_eq!(code(&out), 0);
    assert!(
        waited <= Duration::from_secs(2),
        "the lock of a killed holder freed after {waited:?} (lease 1s)"
    );
}

#[test]
fn lost_lease_stops_the_command_with_exit_76() {
    let s = Scratch::new();
    // The shell starts `sleep` as its own child: stopping COMMAND must stop it too.
    let (mut holder, command_pid) = s.spawn_holder_pid(&["--lease", "600ms"], "sleep 30; true");
    signal(holder.id(), libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(1000));
    let out = s.run(&["--wait", "10s", "job", "--", "echo", "second"]);
    signal(holder.id(), libc::SIGCONT);
    assert_eq!(code(&out), 0, "{out:?}");
    let status = wait_with_timeout(&mut holder, Duration::from_secs(15));
    assert_eq!(status.code(), Some(76), "holder exit {status:?}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(holder.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("lease lost"), "stderr: {stderr}");
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !alive(command_pid),
        "the command kept running after the lease was lost"
    );
}

/// Issue #38 item 5: `--max-hold` stops a COMMAND that is alive and would hold the lock for
/// ever (its lease renewed all along): SIGTERM at the cap, exit 76 with a message naming the
/// cap, what COMMAND started stopped too, and the lock free at once for the next holder.
#[test]
fn max_hold_stops_the_command_at_the_cap_with_exit_76() {
    let s = Scratch::new();
    let started = Instant::now();
    let (mut holder, command_pid) =
        s.spawn_holder_pid(&["--lease", "1s", "--max-hold", "2s"], "sleep 30; true");
    // Renewed while it runs: held past several leases until the cap.
    std::thread::sleep(Duration::from_millis(1500));
    let refused = s.run(&["--no-wait", "job", "--", "true"]);
    assert_eq!(code(&refused), 75, "held before the cap: {refused:?}");
    let status = wait_with_timeout(&mut holder, Duration::from_secs(15));
    let took = started.elapsed();
    assert_eq!(status.code(), Some(76), "holder exit {status:?}");
    assert!(
        took >= Duration::from_secs(2),
        "stopped after {took:?}, before its 2s cap"
    );
    let mut stderr = String::new();
    std::io::Read::read_to_string(holder.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("--max-hold of 2s") && stderr.contains("hold cap ended it"),
        "stderr: {stderr}"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !alive(command_pid),
        "the command kept running after the cap"
    );
    let next = s.run(&["--no-wait", "job", "--", "true"]);
    assert_eq!(
        code(&next),
        0,
        "the lock stayed held after the cap: {next:?}"
    );
    // A command that ends before the cap is untouched by it.
    let quick = s.run(&["--max-hold", "10s", "job", "--", "sh", "-c", "exit 3"]);
    assert_eq!(code(&quick), 3, "{quick:?}");
}

/// Issue #27 item 5: a lock taken away while COMMAND runs, and not noticed before it ends (the
/// default 30 s lease is next renewed at 10 s), is found gone at the release: exit 76 and a
/// message, never COMMAND's 0.
#[test]
fn a_lock_found_gone_at_the_release_exits_76() {
    let s = Scratch::new();
    let (holder, _) = s.spawn_holder(&[], "sleep 3");
    std::thread::sleep(Duration::from_secs(1));
    let out = common::run(&["release", "--url", &s.url(), "--force", "job"]);
    assert_eq!(code(&out), 0, "release --force: {out:?}");
    let out = holder.wait_with_output().expect("wait for the holder");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), 76, "the holder: {stderr}");
    assert!(stderr.contains("no longer held"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// A store that cannot be reached is 69 (EX_UNAVAILABLE), told apart from a lock held by
/// another (75), with or without a wait, and the command does not run.
#[test]
fn an_unreachable_store_exits_69() {
    for url in [
        "redis://127.0.0.1:1",
        "postgres://u@127.0.0.1:1/db",
        "memcached://127.0.0.1:1",
    ] {
        for wait in [&["--no-wait"][..], &["--wait", "1s"], &[]] {
            let out = exec_on(url, wait)
                .args(["job", "--", "echo", "ran"])
                .output()
                .expect("run distlock");
            let stderr = ended_without_running(&out, 69, &format!("{url} {wait:?}"));
            assert_eq!(stderr.lines().count(), 1, "{url}: {stderr}");
        }
    }
}

/// `--wait` rides out a store that is still starting: with the store coming up 1 s after
/// `exec` started, COMMAND runs; with one that never comes up, the exit is 69 once the wait ran
/// out (not at the first refused connection).
#[test]
fn a_wait_retries_an_unreachable_store_until_it_runs_out() {
    use distlock_testkit::servers::{Persistence, PrivateStore, start_redis};
    let mut redis = start_redis(Persistence::None).expect("a private Redis");
    let url = redis.url();
    redis.stop().expect("stop the private Redis");
    let late =
        common::spawn_captured(exec_on(&url, &["--wait", "5s"]).args(["job", "--", "echo", "ran"]));
    std::thread::sleep(Duration::from_secs(1));
    redis.start_again().expect("start the private Redis again");
    let out = late.wait_with_output().expect("wait for distlock");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), 0, "the store came up within the wait: {stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");

    redis.stop().expect("stop the private Redis");
    let started = Instant::now();
    let out = exec_on(&url, &["--wait", "3s"])
        .args(["job", "--", "echo", "ran"])
        .output()
        .expect("run distlock");
    let took = started.elapsed();
    let stderr = ended_without_running(&out, 69, "--wait 3s");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // Tried for the whole wait; the upper bound only catches a hang.
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_secs(30),
        "exit 69 after {took:?} for --wait 3s"
    );
    println!("unreachable store, --wait 3s: exit 69 after {took:?}");
}

/// A build without etcd (the default: its client's build needs protoc) refuses an etcd:// URL
/// as invalid (64), saying how to install a build that has it; `--version` says it too.
#[cfg(not(feature = "etcd"))]
#[test]
fn an_etcd_url_names_the_install_command_that_adds_etcd() {
    for url in ["etcd://127.0.0.1:2379", "etcds://127.0.0.1:2379"] {
        let out = exec_on(url, &["--wait", "2s"])
            .args(["job", "--", "echo", "ran"])
            .output()
            .expect("run distlock");
        let stderr = ended_without_running(&out, 64, url);
        assert!(
            stderr.contains("`cargo install distlock-cli --features etcd`"),
            "{url}: {stderr}"
        );
    }
    let out = common::run(&["--version"]);
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(
        version.contains("etcd: not in this build"),
        "--version: {version}"
    );
}

/// Options come from the environment too: `DISTLOCK_WAIT` bounds the wait (and `--no-wait`
/// overrides it), `DISTLOCK_MAX_HOLD` caps the hold, `DISTLOCK_LEASE` is checked as `--lease`.
#[test]
fn options_come_from_the_environment() {
    let s = Scratch::new();
    let (mut holder, _) = s.spawn_holder(&[], "sleep 30");
    let timed = |env: &[(&str, &str)], extra: &[&str]| {
        let started = Instant::now();
        let out = s
            .exec(extra)
            .envs(env.iter().copied())
            .args(["job", "--", "echo", "ran"])
            .output()
            .expect("run distlock");
        (
            code(&out),
            started.elapsed(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (status, took, stderr) = timed(&[("DISTLOCK_WAIT", "1s")], &[]);
    assert_eq!(status, 75, "{stderr}");
    assert!(
        took >= Duration::from_millis(900),
        "waited {took:?}: {stderr}"
    );
    let (status, took, stderr) = timed(&[("DISTLOCK_WAIT", "20s")], &["--no-wait"]);
    assert_eq!(status, 75, "{stderr}");
    assert!(took < Duration::from_secs(10), "--no-wait waited {took:?}");
    let (status, _, stderr) = timed(&[("DISTLOCK_WAIT", "soon")], &[]);
    assert_eq!(status, 64, "{stderr}");
    assert!(stderr.contains("DISTLOCK_WAIT"), "{stderr}");
    let (status, _, stderr) = timed(&[("DISTLOCK_LEASE", "-1s")], &["--no-wait"]);
    assert_eq!(status, 64, "{stderr}");
    let _ = holder.kill();
    let _ = holder.wait();
    let out = s
        .exec(&[])
        .env("DISTLOCK_MAX_HOLD", "1s")
        .args(["capped", "--", "sleep", "20"])
        .output()
        .expect("run distlock");
    assert_eq!(code(&out), 76, "{}", String::from_utf8_lossy(&out.stderr));
}

/// A missing argument is 64 and the message names it.
#[test]
fn a_missing_argument_is_named() {
    for (args, named) in [
        (&["exec"][..], "<NAME>"),
        (&["exec", "job"], "<COMMAND>"),
        (&["exec", "--", "true"], "<NAME>"),
        (&["elect"], "<NAME>"),
        (&["leader"], "<NAME>"),
        (&["release", "--force"], "<NAME>"),
        (&["status"], "<NAME>"),
    ] {
        let out = common::run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(code(&out), 64, "{args:?}: {stderr}");
        assert!(
            stderr.contains(named),
            "{args:?} does not name {named}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
}

#[test]
fn signals_are_forwarded_and_the_lock_released() {
    let s = Scratch::new();
    let (mut holder, _) = s.spawn_holder(&[], "trap 'exit 42' TERM; while :; do sleep 0.05; done");
    signal(holder.id(), libc::SIGTERM);
    let status = wait_with_timeout(&mut holder, Duration::from_secs(10));
    assert_eq!(
        status.code(),
        Some(42),
        "COMMAND did not get SIGTERM: {status:?}"
    );
    let out = s.run(&["--no-wait", "job", "--", "true"]);
    assert_eq!(
        code(&out),
        0,
        "the lock stayed held after the command ended"
    );
}

#[test]
fn bad_arguments_are_clear_errors() {
    let s = Scratch::new();
    let out = s.run(&["--lease", "1ms", "job", "--", "true"]);
    assert_eq!(code(&out), 64);
    assert!(String::from_utf8_lossy(&out.stderr).contains("lease"));

    let out = Command::new(BIN)
        .args([
            "exec",
            "--url",
            "ftp://admin:hunter2@host",
            "job",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 64);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown scheme"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "password printed: {stderr}");

    let out = s.run(&["", "--", "true"]);
    assert_eq!(code(&out), 64);

    let out = s.run(&["job", "--", "/nonexistent/command"]);
    assert_eq!(code(&out), 127);
}

/// The same contract on every server backend: the command sees a token, a held lock is refused
/// with 75, and the lock is free again after the holder ends.
#[test]
fn exec_works_on_every_server_backend() {
    for store in common::servers("exec") {
        let (backend, url) = (store.name, &store.url);
        let name = format!("exec-test/{backend}/{}", rand_suffix());
        let scratch = Scratch::new();
        let ready = scratch.path("ready");
        let script = format!(
            "echo $DISTLOCK_FENCING_TOKEN > {}; sleep 30",
            ready.display()
        );
        let mut holder = holding(url, backend, &[&name], &script, &ready);
        let first: u64 = number_in(&ready);
        let refused = Command::new(BIN)
            .args(["exec", "--url", url, "--no-wait", &name, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(code(&refused), 75, "{backend}: {refused:?}");
        signal(holder.id(), libc::SIGTERM);
        wait_with_timeout(&mut holder, Duration::from_secs(10));
        let next = Command::new(BIN)
            .args(["exec", "--url", url, "--wait", "10s", &name, "--"])
            .args(["sh", "-c", "echo $DISTLOCK_FENCING_TOKEN"])
            .output()
            .unwrap();
        assert_eq!(code(&next), 0, "{backend}: {next:?}");
        let second: u64 = String::from_utf8_lossy(&next.stdout)
            .trim()
            .parse()
            .unwrap();
        assert!(second > first, "{backend}: token {second} after {first}");
    }
}

/// Waits until `holder`'s command has written `ready`; fails with its stderr if it exits first.
fn wait_until_ran(holder: &mut Child, ready: &Path, backend: &str) {
    let started = Instant::now();
    while std::fs::read_to_string(ready)
        .unwrap_or_default()
        .trim()
        .is_empty()
    {
        if let Some(status) = holder.try_wait().unwrap() {
            let mut stderr = String::new();
            if let Some(pipe) = holder.stderr.as_mut() {
                std::io::Read::read_to_string(pipe, &mut stderr).ok();
            }
            panic!(
                "exec on {backend} exited {status} before running the command: {stderr}\n\
                 is the server up? run scripts/services.sh (or DISTLOCK_SKIP={backend})"
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{backend}: holder never ran"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Issue #8, item 5: every invalid argument is exit 64 and one line, never clap's 2 (which a
/// script cannot tell from COMMAND's own 2). Parsing fails before any store is opened, so one
/// store stands for all.
#[test]
fn invalid_arguments_exit_64_with_one_line() {
    let s = Scratch::new();
    for bad in [
        &["--lease", "-1s"][..],
        &["--lease=-1s"],
        &["--lease", "99999999999999999999s"],
        &["--lease", "584942417355y"],
        &["--lease", "soon"],
        &["--wait", "-1s"],
        &["--wait=-1s"],
        &["--wait", "99999999999999999999s"],
        &["--wait", "584942417355y"],
        &["--wait", "1s", "--no-wait"],
        &["--max-hold", "0s"],
        &["--max-hold", "-1s"],
        &["--max-hold", "soon"],
        &["--no-such-flag"],
    ] {
        let mut args = bad.to_vec();
        args.extend(["job", "--", "echo", "ran"]);
        let out = s.run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(code(&out), 64, "{bad:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{bad:?}: the command ran");
        assert_eq!(stderr.lines().count(), 1, "{bad:?}: {stderr}");
        assert!(stderr.starts_with("distlock: "), "{bad:?}: {stderr}");
    }
    let out = Command::new(BIN).args(["exec", "job"]).output().unwrap();
    assert_eq!(code(&out), 64, "no COMMAND: {out:?}");
    for ok in [&["--help"][..], &["--version"], &["exec", "--help"]] {
        let out = Command::new(BIN).args(ok).output().unwrap();
        assert_eq!(code(&out), 0, "{ok:?}: {out:?}");
        assert!(!out.stdout.is_empty(), "{ok:?} printed nothing");
    }
}

/// Issue #8, item 4: a `--wait` past what the clock can represent is "wait forever", not a panic
/// (exit 101): the command runs at once on a free lock, and after the holder ends on a held one.
#[test]
fn a_wait_too_long_for_the_clock_waits_forever() {
    const FOREVER: &str = "500000000000y";
    for store in common::every_store("a huge --wait") {
        let (backend, url) = (store.name, &store.url);
        let name = format!("exec-test/huge-wait/{}", common::unique());
        let free = Command::new(BIN)
            .args([
                "exec", "--url", url, "--wait", FOREVER, &name, "--", "echo", "ran",
            ])
            .output()
            .unwrap();
        assert_eq!(code(&free), 0, "{backend}, free lock: {free:?}");
        assert_eq!(String::from_utf8_lossy(&free.stdout).trim(), "ran");

        let scratch = Scratch::new();
        let ready = scratch.path("ready");
        let script = format!("echo $$ > {}; sleep 30", ready.display());
        let mut holder = holding(url, backend, &[&name], &script, &ready);
        let mut waiter = Command::new(BIN)
            .args([
                "exec", "--url", url, "--wait", FOREVER, &name, "--", "echo", "ran",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1000));
        assert!(
            waiter.try_wait().unwrap().is_none(),
            "{backend}: the waiter did not wait: {:?}",
            waiter.wait_with_output()
        );
        signal(holder.id(), libc::SIGTERM);
        wait_with_timeout(&mut holder, Duration::from_secs(10));
        wait_with_timeout(&mut waiter, Duration::from_secs(10));
        let out = waiter.wait_with_output().unwrap();
        assert_eq!(code(&out), 0, "{backend}, held lock: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");
    }
}

/// Issue #8, item 6: `kill -9` of distlock must not leave COMMAND, or what COMMAND started,
/// running without the lock. The shell and both its `sleep`s must be gone: at once on an idle
/// machine; the test allows ten seconds because the watcher that kills them is a process the
/// scheduler must first run, and the test suite runs several test binaries side by side (one
/// run on a load average of 16 took over two).
#[test]
fn killing_distlock_kills_command_and_its_children() {
    for store in common::every_store("kill -9 of exec") {
        let (backend, url) = (store.name, &store.url);
        let name = format!("exec-test/kill-9/{}", common::unique());
        let scratch = Scratch::new();
        let pids = scratch.path("pids");
        let script = format!(
            "sleep 60 & a=$!; sleep 60 & b=$!; echo $$ $a $b > {p}.tmp; mv {p}.tmp {p}; wait",
            p = pids.display()
        );
        // 3 s: no shorter than the ZooKeeper and etcd URLs' sessions, which refuse a lease they
        // cannot keep.
        let mut holder = Command::new(BIN)
            .args(["exec", "--url", url, "--lease", "3s", &name, "--"])
            .args(["sh", "-c", &script])
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn holder");
        wait_until_ran(&mut holder, &pids, backend);
        let pids: Vec<i32> = std::fs::read_to_string(&pids)
            .unwrap()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(pids.len(), 3, "{backend}: {pids:?}");
        assert!(pids.iter().all(|&p| common::running(p)), "{backend}");
        signal(holder.id(), libc::SIGKILL);
        holder.wait().unwrap();
        let gone = common::eventually(Duration::from_secs(10), || {
            pids.iter().all(|&p| !common::running(p))
        });
        let left: Vec<i32> = pids
            .iter()
            .copied()
            .filter(|&p| common::running(p))
            .collect();
        for &p in &left {
            // SAFETY: kill(2) on processes this test started, so they do not linger.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        assert!(
            gone,
            "{backend}: processes {left:?} of COMMAND outlived a SIGKILLed distlock"
        );
    }
}

// ---- The flavours (--shared, --write, --limit, --fair), -E and -c: issue #29, item 4 ----------

/// The stores these cases run on: the embedded default and Redis (a server store whose fair
/// lock, read-write lock and semaphore are kept by Lua scripts). Which store refuses which
/// flavour is the table of docs/guarantees.md (Redlock, and SQL session locks, refuse all three;
/// MySQL refuses the fair lock).
fn mode_stores(what: &str) -> Vec<common::Store> {
    let mut stores = vec![common::sqlite()];
    stores.extend(
        common::servers(what)
            .into_iter()
            .filter(|s| s.name == "redis"),
    );
    stores
}

/// `distlock exec --url URL ARGS…` with no DISTLOCK_URL from the environment.
fn exec_on(url: &str, args: &[&str]) -> Command {
    let mut cmd = common::distlock(&["exec", "--url", url]);
    cmd.args(args);
    cmd
}

/// Starts `exec FLAGS NAME` whose command writes `ready` and then sleeps; returns once it runs.
fn hold(store: &common::Store, flags: &[&str], name: &str, ready: &Path) -> Child {
    let script = format!("echo $$ > {}; exec sleep 30", ready.display());
    let mut args = flags.to_vec();
    args.push(name);
    holding(&store.url, store.name, &args, &script, ready)
}

/// Starts `exec --url URL ARGS… -- sh -c SCRIPT` on `backend`, whose SCRIPT writes `ready`;
/// returns once it has.
fn holding(url: &str, backend: &str, args: &[&str], script: &str, ready: &Path) -> Child {
    let mut holder = exec_on(url, args)
        .args(["--", "sh", "-c", script])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    wait_until_ran(&mut holder, ready, backend);
    holder
}

/// Ends a holder started by [`hold`]: SIGTERM is forwarded to its command, which ends, and
/// the lock is released.
fn stop(mut holder: Child) {
    signal(holder.id(), libc::SIGTERM);
    wait_with_timeout(&mut holder, Duration::from_secs(10));
}

/// Runs `exec FLAGS --no-wait NAME -- true` and answers its exit status.
fn try_exec(store: &common::Store, flags: &[&str], name: &str) -> (i32, String) {
    let mut args = flags.to_vec();
    args.extend(["--no-wait", name, "--", "true"]);
    let out = exec_on(&store.url, &args).output().expect("run");
    (
        code(&out),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn shared_holders_run_together_and_a_writer_is_excluded() {
    for store in mode_stores("exec --shared") {
        let scratch = Scratch::new();
        let name = format!("rw-{}", common::unique());
        let reader = hold(&store, &["--shared"], &name, &scratch.path("r1"));
        // A second reader at the same time: admitted.
        let second = hold(&store, &["--shared"], &name, &scratch.path("r2"));
        // A writer: refused while readers hold it.
        let (status, stderr) = try_exec(&store, &["--write"], &name);
        assert_eq!(
            status, 75,
            "{}: a writer got in with readers: {stderr}",
            store.name
        );
        stop(second);
        let (status, _) = try_exec(&store, &["--write"], &name);
        assert_eq!(status, 75, "{}: a writer got in with a reader", store.name);
        stop(reader);
        // No reader left: the writer gets it, and readers are refused while it holds.
        let writer = hold(&store, &["--write"], &name, &scratch.path("w"));
        let (status, _) = try_exec(&store, &["--shared"], &name);
        assert_eq!(status, 75, "{}: a reader got in with a writer", store.name);
        stop(writer);
        let (status, stderr) = try_exec(&store, &["--shared"], &name);
        assert_eq!(status, 0, "{}: {stderr}", store.name);
    }
}

#[test]
fn a_limit_admits_n_holders_and_refuses_another_size() {
    for store in mode_stores("exec --limit") {
        let scratch = Scratch::new();
        let name = format!("pool-{}", common::unique());
        let first = hold(&store, &["--limit", "2"], &name, &scratch.path("p1"));
        let second = hold(&store, &["--limit", "2"], &name, &scratch.path("p2"));
        let (status, stderr) = try_exec(&store, &["--limit", "2"], &name);
        assert_eq!(status, 75, "{}: a third permit of 2: {stderr}", store.name);
        // A third that waits runs as soon as one of the two ends.
        let ran = scratch.path("third");
        let script = format!("echo ran > {}", ran.display());
        let mut third = exec_on(
            &store.url,
            &["--limit", "2", &name, "--", "sh", "-c", &script],
        )
        .spawn()
        .expect("spawn");
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            !ran.exists(),
            "{}: the third ran beside two holders",
            store.name
        );
        stop(first);
        let status = wait_with_timeout(&mut third, Duration::from_secs(10));
        assert!(status.success(), "{}: {status}", store.name);
        assert!(ran.exists(), "{}", store.name);
        // The semaphore has 2 permits: asking 3 of it is refused (64), naming both sizes.
        let (status, stderr) = try_exec(&store, &["--limit", "3"], &name);
        assert_eq!(status, 64, "{}: {stderr}", store.name);
        assert!(
            stderr.contains('2') && stderr.contains('3') && stderr.lines().count() == 1,
            "{}: {stderr}",
            store.name
        );
        stop(second);
    }
    let scratch = Scratch::new();
    let out = scratch.run(&["--limit", "0", "x", "--", "true"]);
    assert_eq!(code(&out), 64, "{out:?}");
}

#[test]
fn fair_waiters_run_in_the_order_they_came() {
    const WAITERS: usize = 5;
    for store in mode_stores("exec --fair") {
        let scratch = Scratch::new();
        let name = format!("fair-{}", common::unique());
        let order = scratch.path("order");
        let holder = hold(&store, &["--fair"], &name, &scratch.path("h"));
        let mut waiters = Vec::new();
        for i in 0..WAITERS {
            let script = format!("echo {i} >> {}", order.display());
            let waiter = exec_on(&store.url, &["--fair", &name, "--", "sh", "-c", &script])
                .spawn()
                .expect("spawn waiter");
            waiters.push(waiter);
            // The next comes only once this one is in the queue (the store counts it).
            let queued = common::eventually(Duration::from_secs(10), || {
                waiting(&store, &name) == Some(i as u64 + 1)
            });
            assert!(queued, "{}: waiter {i} never queued", store.name);
        }
        stop(holder);
        for mut waiter in waiters {
            let status = wait_with_timeout(&mut waiter, Duration::from_secs(20));
            assert!(status.success(), "{}: {status}", store.name);
        }
        let ran: Vec<usize> = std::fs::read_to_string(&order)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(ran, (0..WAITERS).collect::<Vec<_>>(), "{}", store.name);
    }
}

/// How many wait for the fair lock `name`, as `distlock status --json` says.
fn waiting(store: &common::Store, name: &str) -> Option<u64> {
    let out = Command::new(BIN)
        .args(["status", "--json", "--url", &store.url, name])
        .output()
        .expect("status");
    let locks: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    locks.as_array()?.iter().find(|l| l["kind"] == "fair")?["waiters"].as_u64()
}

#[test]
fn a_conflict_exits_with_the_code_asked() {
    let s = Scratch::new();
    let (mut holder, _) = s.spawn_holder(&[], "sleep 30");
    for (args, expected) in [
        (&["-E", "3", "--no-wait"][..], 3),
        (&["--conflict-exit-code", "0", "--no-wait"][..], 0),
        (&["--conflict-exit-code", "9", "--wait", "100ms"][..], 9),
        (&["--no-wait"][..], 75),
    ] {
        let mut all = args.to_vec();
        all.extend(["job", "--", "echo", "ran"]);
        let out = s.run(&all);
        assert_eq!(code(&out), expected, "{args:?}: {out:?}");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: the command ran without the lock"
        );
    }
    holder.kill().ok();
    holder.wait().ok();
    // Only a conflict: a store that cannot be reached is still 69, a bad argument 64.
    let out = Command::new(BIN)
        .args([
            "exec",
            "--url",
            "postgres://u@127.0.0.1:1/x",
            "-E",
            "3",
            "x",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 69, "{out:?}");
    let out = s.run(&["-E", "300", "job", "--", "true"]);
    assert_eq!(code(&out), 64, "{out:?}");
}

#[test]
fn a_shell_string_runs_under_the_lock() {
    let s = Scratch::new();
    let out = s.run(&[
        "job",
        "-c",
        "echo \"$DISTLOCK_LOCK_NAME\" | tr a-z A-Z; exit 3",
    ]);
    assert_eq!(code(&out), 3, "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "JOB\n");
    // The lock was released: a --no-wait takes it.
    let out = s.run(&["--no-wait", "job", "--command", "true"]);
    assert_eq!(code(&out), 0, "{out:?}");
    // Both forms, or neither: a usage error naming what is wrong.
    let out = s.run(&["job", "-c", "true", "--", "true"]);
    assert_eq!(code(&out), 64, "{out:?}");
    let out = s.run(&["job"]);
    assert_eq!(code(&out), 64, "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("COMMAND"),
        "{out:?}"
    );
}

/// A store without a flavour refuses it: exit 64 and a line saying so, and COMMAND does not run
/// (memcached has neither fair locks, read-write locks nor semaphores; docs/guarantees.md).
#[test]
fn a_store_without_the_flavour_refuses_it() {
    let Some(store) = common::servers("exec flavours on memcached")
        .into_iter()
        .find(|s| s.name == "memcached")
    else {
        return;
    };
    for (flags, flavour) in [
        (&["--fair"][..], "fair locks"),
        (&["--shared"], "read locks"),
        (&["--write"], "write locks"),
        (&["--limit", "2"], "semaphores"),
    ] {
        let mut args = flags.to_vec();
        args.extend(["x", "--", "echo", "ran"]);
        let out = exec_on(&store.url, &args).output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(code(&out), 64, "{flags:?}: {stderr}");
        assert!(
            stderr.contains("does not support") && stderr.contains(flavour),
            "{flags:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{flags:?}: COMMAND ran");
    }
}

#[test]
fn flavours_exclude_each_other_as_flags() {
    let s = Scratch::new();
    for args in [
        &["--shared", "--write"][..],
        &["--shared", "--limit", "2"][..],
        &["--fair", "--write"][..],
    ] {
        let mut all = args.to_vec();
        all.extend(["job", "--", "true"]);
        let out = s.run(&all);
        assert_eq!(code(&out), 64, "{args:?}: {out:?}");
    }
}

// ---- The command line itself: completions, manual pages, the environment in --help ---------

#[test]
fn completions_and_manual_pages_are_generated() {
    for (shell, mark) in [
        ("bash", "complete"),
        ("zsh", "#compdef distlock"),
        ("fish", "complete -c distlock"),
        ("elvish", "distlock"),
        ("powershell", "distlock"),
    ] {
        let out = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(mark), "{shell}: {script}");
        // The flags of exec are in it, the new ones too.
        assert!(script.contains("conflict-exit-code"), "{shell}");
    }
    let out = Command::new(BIN)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 64, "{out:?}");

    let out = Command::new(BIN).arg("man").output().unwrap();
    assert_eq!(code(&out), 0, "{out:?}");
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(
        page.starts_with(".ie") || page.contains(".TH distlock 1"),
        "{page}"
    );
    assert!(
        page.contains("DISTLOCK_LOG"),
        "the page lacks the environment"
    );
    let out = Command::new(BIN).args(["man", "exec"]).output().unwrap();
    assert_eq!(code(&out), 0, "{out:?}");
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(
        page.contains(".TH distlock\\-exec 1") || page.contains("distlock-exec"),
        "{page}"
    );
    assert!(page.contains("shared"), "{page}");
    let out = Command::new(BIN).args(["man", "nosuch"]).output().unwrap();
    assert_eq!(code(&out), 64, "{out:?}");
}

#[test]
fn help_names_every_environment_variable() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert_eq!(code(&out), 0);
    let help = String::from_utf8(out.stdout).unwrap();
    for var in ["DISTLOCK_URL", "DISTLOCK_LOG", "DISTLOCK_FENCING_TOKEN"] {
        assert!(help.contains(var), "--help lacks {var}:\n{help}");
    }
    let out = Command::new(BIN).args(["exec", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for text in [
        "DISTLOCK_URL",
        "--shared",
        "--limit",
        "--fair",
        "--conflict-exit-code",
        "-c",
    ] {
        assert!(help.contains(text), "exec --help lacks {text}:\n{help}");
    }
}
