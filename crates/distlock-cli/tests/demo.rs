//! `distlock demo` end to end: real instance processes, real HTTP, the embedded SQLite store and
//! lock (and the PostgreSQL and MariaDB servers as store or lock), small sizes. Each test asserts
//! the audits the demo prints as JSON.

use std::process::{Command, Output};

use serde_json::Value;

fn demo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_distlock"))
        .arg("demo")
        .args(args)
        .output()
        .expect("running distlock demo")
}

/// The words of a command line (arguments without spaces of their own).
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// The JSON objects of a `--json` run of `distlock demo LINE`, after checking the exit status.
fn runs(line: &str, expect_success: bool) -> Vec<Value> {
    let out = demo(&words(line));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.success(),
        expect_success,
        "exit status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

fn find<'a>(runs: &'a [Value], scenario: &str, strategy: &str, instances: u64) -> &'a Value {
    runs.iter()
        .find(|r| {
            r["scenario"] == scenario && r["strategy"] == strategy && r["instances"] == instances
        })
        .unwrap_or_else(|| panic!("no {scenario}/{strategy}/{instances} run in {runs:#?}"))
}

/// The unprotected runs of `all` (strategy `none`, 3 instances) raced, as the demo means them
/// to: units oversold (and said so) and updates lost. Answers the counter run.
fn assert_raced(all: &[Value]) -> &Value {
    let stock = find(all, "stock", "none", 3);
    assert!(stock["oversold"].as_i64().unwrap() > 0, "{stock}");
    assert_eq!(stock["verdict"], "wrong-as-expected", "{stock}");
    let counter = find(all, "counter", "none", 3);
    assert!(counter["lost_updates"].as_i64().unwrap() > 0, "{counter}");
    counter
}

/// Stock: no unit oversold; counter: no update lost; and no request failed.
fn assert_correct(run: &Value) {
    assert_eq!(run["correct"], true, "{run}");
    assert_eq!(run["failed"], 0, "{run}");
    assert_eq!(run["verdict"], "correct", "{run}");
    match run["scenario"].as_str() {
        Some("stock") => assert_eq!(run["oversold"], 0, "{run}"),
        Some("counter" | "pause") => assert_eq!(run["lost_updates"], 0, "{run}"),
        other => panic!("unknown scenario {other:?}"),
    }
}

#[test]
fn every_protecting_strategy_is_correct_across_three_instances() {
    let all = runs(
        "--json --scenario stock,counter --requests 120 --instances 3 --concurrency 12 --segments 4 --strategy optimistic,lock,atomic,segmented",
        true,
    );
    assert_eq!(all.len(), 8, "{all:#?}");
    for run in &all {
        assert_correct(run);
        assert_eq!(run["requests"], 120);
    }
    // With a lock or an atomic statement every buyer gets an item and every "+1" counts.
    for strategy in ["lock:sqlite", "atomic", "segmented:sqlite"] {
        for scenario in ["stock", "counter"] {
            assert_eq!(find(&all, scenario, strategy, 3)["succeeded"], 120);
        }
    }
}

/// The test app: 5,000 concurrent requests on 50 keys through 3 processes, every
/// request locked by its key by the service's `distlock_axum::LockLayer`: no unit oversold, no
/// update lost, every request served (the lock waits, so no 423 here; the crate's own tests
/// check the status when held).
#[test]
fn fifty_keys_through_the_lock_layer_lose_nothing_and_oversell_nothing() {
    let all = runs(
        "--json --scenario stock,counter --keys 50 --instances 3 --strategy lock",
        true,
    );
    assert_eq!(all.len(), 2, "{all:#?}");
    for scenario in ["stock", "counter"] {
        let locked = find(&all, scenario, "lock:sqlite", 3);
        assert_correct(locked);
        assert_eq!(locked["requests"], 5000, "{locked}");
        assert_eq!(locked["succeeded"], 5000, "{locked}");
    }
}

/// The same app told not to wait (`--lock-wait 0s`): a request whose key is locked is answered
/// the layer's configured 423 across the 3 processes, and the rest still oversell nothing.
/// Request n goes to key n mod 50, so 64 requests in flight always have some on one key.
#[test]
fn a_held_key_answers_423_when_the_layer_may_not_wait() {
    let all = runs(
        "--json --scenario stock --keys 50 --instances 3 --strategy lock --lock-wait 0s --concurrency 64",
        true,
    );
    let locked = find(&all, "stock", "lock:sqlite", 3);
    assert_correct(locked);
    let busy = locked["busy"].as_u64().unwrap_or(0);
    let answered = locked["succeeded"].as_u64().unwrap_or(0) + busy;
    assert!(
        busy > 0,
        "64 requests at once on 50 keys, none found its key locked: {locked}"
    );
    assert_eq!(
        answered, 5000,
        "every request sold (200) or busy (423): {locked}"
    );
}

/// The server backends: (name in DISTLOCK_SKIP, URL variable, loopback default, server).
const SERVERS: &[(&str, &str, &str, &str)] = &[
    (
        "redis",
        "DISTLOCK_REDIS_URL",
        "redis://127.0.0.1:6379",
        "Redis",
    ),
    (
        "redis-sentinel",
        "DISTLOCK_REDIS_SENTINEL_URL",
        "redis-sentinel://127.0.0.1:6410,127.0.0.1:6411,127.0.0.1:6412/distlock",
        "Redis behind Sentinel",
    ),
    (
        "redis-cluster",
        "DISTLOCK_REDIS_CLUSTER_URL",
        "redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
        "Redis Cluster",
    ),
    (
        "postgres",
        "DISTLOCK_POSTGRES_URL",
        "postgres://postgres@127.0.0.1:5432/distlock_test",
        "PostgreSQL",
    ),
    (
        "mysql",
        "DISTLOCK_MYSQL_URL",
        "mysql://root@127.0.0.1:3306/distlock_test",
        "MariaDB/MySQL",
    ),
    // The default session TTL (10 s): nothing here kills a holder, and with 3 s a loaded CI
    // machine (etcd answering in up to a second) lost a session mid-request, failing 2 of 60.
    #[cfg(feature = "etcd")]
    ("etcd", "DISTLOCK_ETCD_URL", "etcd://127.0.0.1:2379", "etcd"),
    (
        "memcached",
        "DISTLOCK_MEMCACHED_URL",
        "memcached://127.0.0.1:11211",
        "memcached",
    ),
];

#[test]
fn the_lock_strategy_is_correct_on_every_server_backend() {
    // A lock strategy is only a distlock URL: each backend runs with no demo code of its own.
    let mut args = vec![
        "--json".to_string(),
        "--scenario".into(),
        "stock,counter".into(),
        "--strategy".into(),
        "lock,segmented".into(),
        "--requests".into(),
        "60".into(),
        "--concurrency".into(),
        "8".into(),
        "--segments".into(),
        "4".into(),
    ];
    let mut servers = Vec::new();
    for &(name, var, default, server) in SERVERS {
        if distlock_testkit::skipped(name, &format!("the demo's lock strategy on {name}")) {
            continue;
        }
        let url = std::env::var(var).unwrap_or_else(|_| default.to_string());
        servers.push((name, format!("{server} at {}", distlock::redact(&url))));
        args.extend(["--lock-url".to_string(), url]);
    }
    if servers.is_empty() {
        return;
    }
    let out = demo(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    for (name, server) in &servers {
        for scenario in ["stock", "counter"] {
            let run = find(&all, scenario, &format!("lock:{name}"), 3);
            assert!(
                run["verdict"] != "FAILED",
                "{server} not reachable, or the demo failed on it; run scripts/services.sh (or \
                 set DISTLOCK_SKIP={name} to skip it on purpose): {run}"
            );
            assert_correct(run);
            assert_eq!(run["succeeded"], 60, "{run}");
        }
    }
    let first = servers[0].0;
    for scenario in ["stock", "counter"] {
        assert_correct(find(&all, scenario, &format!("segmented:{first}"), 3));
    }
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The URL of server backend `name` and how to name it in a failure, or `None` when
/// DISTLOCK_SKIP lists it.
fn server(name: &str, what: &str) -> Option<(String, String)> {
    let &(_, var, default, server) = SERVERS
        .iter()
        .find(|(n, ..)| *n == name)
        .expect("a known server");
    if distlock_testkit::skipped(name, &format!("{what} on {name}")) {
        return None;
    }
    let url = std::env::var(var).unwrap_or_else(|_| default.to_string());
    let shown = format!("{server} at {}", distlock::redact(&url));
    Some((url, shown))
}

/// The JSON runs of a demo whose inventory store is `server`; a failed demo (the server down
/// first of all) fails the test with the fix.
fn runs_on_store(server: &str, name: &str, line: &str) -> Vec<Value> {
    let out = demo(&words(line));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the demo failed with its store on {server}: is it running? run scripts/services.sh (or \
         set DISTLOCK_SKIP={name} to skip it on purpose)\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

/// The inventory store on a server: every protecting strategy correct (the row lock included,
/// which only a server has), and no protection racing as on SQLite.
fn the_store_works_on(name: &str) {
    let Some((url, server)) = server(name, "the demo's inventory store") else {
        return;
    };
    let protected = runs_on_store(
        &server,
        name,
        &format!(
            "--json --scenario stock,counter --store {url} --requests 200 --instances 3 --concurrency 12 --segments 4 --strategy optimistic,lock,atomic,segmented,row-lock"
        ),
    );
    assert_eq!(protected.len(), 10, "{protected:#?}");
    for scenario in ["stock", "counter"] {
        for strategy in [
            "optimistic",
            "lock:sqlite",
            "atomic",
            "segmented:sqlite",
            "row-lock",
        ] {
            let run = find(&protected, scenario, strategy, 3);
            assert_correct(run);
            if strategy != "optimistic" {
                assert_eq!(run["succeeded"], 200, "{run}");
            }
        }
    }
    // A 5 ms pause between read and write makes the race certain (see below).
    let unprotected = runs_on_store(
        &server,
        name,
        &format!(
            "--json --store {url} --requests 200 --concurrency 12 --pause 5ms --strategy none"
        ),
    );
    let counter = assert_raced(&unprotected);
    assert_eq!(counter["verdict"], "wrong-as-expected", "{counter}");
}

// One test per server: the runs of each share its demo_* tables, so they must not overlap.
#[test]
fn the_store_works_on_postgres() {
    the_store_works_on("postgres");
}

#[test]
fn the_store_works_on_mysql() {
    the_store_works_on("mysql");
}

#[test]
fn row_lock_is_refused_or_skipped_on_sqlite() {
    let alone = demo(&["--strategy", "row-lock"]);
    assert_eq!(alone.status.code(), Some(64));
    assert!(
        String::from_utf8_lossy(&alone.stderr).contains("row locks"),
        "{alone:?}"
    );
    let all = demo(&words(
        "--json --scenario counter --strategy atomic,row-lock --requests 20",
    ));
    assert!(all.status.success(), "{all:?}");
    let stderr = String::from_utf8_lossy(&all.stderr);
    assert!(stderr.contains("row-lock skipped"), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&all.stdout).lines().count(), 1);
}

#[test]
fn no_protection_oversells_and_loses_updates() {
    // A 5 ms pause between read and write: with 12 requests in flight, reads that overlap a
    // write are certain, so the race must show.
    let all = runs(
        "--json --requests 120 --concurrency 12 --pause 5ms --strategy none",
        true,
    );
    let counter = assert_raced(&all);
    assert_eq!(counter["correct"], false, "{counter}");
}

#[test]
fn a_local_mutex_is_correct_in_one_instance_and_wrong_in_three() {
    let all = runs(
        "--json --scenario counter --requests 120 --concurrency 12 --pause 5ms --strategy local-mutex",
        true,
    );
    assert_eq!(all.len(), 2, "one instance, then three: {all:#?}");
    assert_correct(find(&all, "counter", "local-mutex", 1));
    let three = find(&all, "counter", "local-mutex", 3);
    assert!(three["lost_updates"].as_i64().unwrap() > 0, "{three}");
}

#[test]
fn the_table_verdicts_and_chart_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("demo.svg");
    let out = demo(&[
        "--scenario",
        "counter",
        "--strategy",
        "none,atomic",
        "--requests",
        "60",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("| scenario |"), "{stdout}");
    assert!(
        stdout.contains("atomic               (3 instances): correct"),
        "{stdout}"
    );
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    assert!(svg.contains("atomic"), "{svg}");
}

#[test]
fn an_instance_that_cannot_start_is_reported_with_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let lock_url = format!(
        "sqlite:{}",
        dir.path().join("missing/dir/locks.db").display()
    );
    let line =
        format!("--json --scenario counter --strategy lock --requests 10 --lock-url {lock_url}");
    let all = runs(&line, false);
    assert_eq!(all.len(), 1);
    let run = &all[0];
    assert_eq!(run["verdict"], "FAILED", "{run}");
    let problems = run["problems"].to_string();
    assert!(problems.contains("failed to start"), "{problems}");
    assert!(
        problems.contains("connecting to the lock store"),
        "{problems}"
    );
}

#[test]
fn requests_that_time_out_fail_the_run() {
    // Every request sleeps 50 ms between read and write but may take only 10 ms.
    let all = runs(
        "--json --scenario counter --strategy optimistic --requests 6 --pause 50ms --request-timeout 10ms",
        false,
    );
    let optimistic = find(&all, "counter", "optimistic", 3);
    assert_eq!(optimistic["verdict"], "FAILED", "{optimistic}");
    // Nearly all fail; on a loaded machine one was seen to get through (its timer started late),
    // which is not what this test is about: a run with failed requests is a failed run.
    let failed = optimistic["failed"].as_u64().unwrap_or(0);
    assert!((1..=6).contains(&failed), "{optimistic}");
    assert!(
        optimistic["problems"]
            .to_string()
            .contains("no answer within 10ms"),
        "{optimistic}"
    );
}

/// The pids of the running children of `parent` whose command line contains `needle`.
fn children_of(parent: u32, needle: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command name (which is in parentheses): state, ppid, …
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if ppid == Some(parent) && cmdline.contains(needle) {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn an_instance_killed_mid_run_is_reported() {
    // 20 ms per request, 4 in flight: the run lasts well over a second.
    let child = Command::new(env!("CARGO_BIN_EXE_distlock"))
        .args([
            "demo",
            "--json",
            "--scenario",
            "counter",
            "--strategy",
            "none",
        ])
        .args(["--requests", "400", "--concurrency", "4", "--pause", "20ms"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let victim = loop {
        let instances = children_of(child.id(), "demo serve");
        if instances.len() == 3 {
            break instances[1];
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the instances never showed up"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // Let it serve a little first.
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: kill(2) on a pid that is a child of our own child, with a valid signal.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    let out = child.wait_with_output().unwrap();
    assert!(
        !out.status.success(),
        "a killed instance must fail the demo"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let run: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(run["verdict"], "FAILED", "{run}");
    let problems = run["problems"].to_string();
    assert!(
        problems.contains("exited while serving") || problems.contains("failed to start"),
        "{problems}"
    );
    assert!(problems.contains("SIGKILL"), "{problems}");
}

#[test]
fn invalid_arguments_exit_64() {
    assert_eq!(demo(&["--instances", "0"]).status.code(), Some(64));
    assert_eq!(
        demo(&["--requests", "4", "--segments", "8"]).status.code(),
        Some(64)
    );
    let unknown_lock = demo(&["--strategy", "lock", "--lock-url", "nosuch://u:hunter2@h"]);
    assert_eq!(unknown_lock.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&unknown_lock.stderr);
    assert!(
        stderr.contains("--lock-url") && !stderr.contains("hunter2"),
        "{stderr}"
    );
    let bad_store = demo(&["--store", "ftp://user:hunter2@x"]);
    assert_eq!(bad_store.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&bad_store.stderr);
    assert!(
        stderr.contains("--store") && !stderr.contains("hunter2"),
        "{stderr}"
    );
}

/// The pause scenario: an instance stopped past its lease while holding the lock writes late.
/// The plain lock loses updates (wrong, as expected); with the store's fence the late write is
/// refused and the counter is right. On SQLite locks and on Redis locks, twice each: the
/// verdicts must be the same in every run (the load generator routes around the stopped
/// instance, so the other instances' "+1"s always land during the stop).
#[test]
fn pause_scenario_shows_the_plain_lock_wrong_and_the_fence_correct() {
    for lock_url in [None, Some("redis://127.0.0.1:6379")] {
        let mut line = "--json --scenario pause --requests 200".to_string();
        if let Some(url) = lock_url {
            line.push_str(&format!(" --lock-url {url}"));
        }
        let name = if lock_url.is_some() {
            "redis"
        } else {
            "sqlite"
        };
        for _ in 0..2 {
            let all = runs(&line, true);
            let fenced = find(&all, "pause", &format!("lock+fence:{name}"), 3);
            assert_correct(fenced);
            assert_eq!(fenced["refused"], 1, "{fenced}");
            assert_eq!(fenced["succeeded"], 199, "{fenced}");
            let plain = find(&all, "pause", &format!("lock:{name}"), 3);
            assert_eq!(plain["verdict"], "wrong-as-expected", "{plain}");
            assert!(plain["lost_updates"].as_i64().unwrap() > 0, "{plain}");
        }
    }
}

#[test]
fn pause_scenario_needs_two_instances() {
    let alone = demo(&["--scenario", "pause", "--instances", "1"]);
    assert_eq!(alone.status.code(), Some(64));
    assert!(
        String::from_utf8_lossy(&alone.stderr).contains("--instances 2"),
        "{alone:?}"
    );
}
