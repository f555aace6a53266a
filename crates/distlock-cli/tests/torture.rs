//! `distlock torture` end to end: the real binary, real worker processes killed and stopped, a
//! real store behind the fault proxy. Each fault runs 5 s; the figures are printed, and only
//! outcomes are asserted: no stale write accepted, no token out of order, and a stop that
//! really let a second holder in.

mod common;

use std::process::Command;

use common::BIN;

/// Runs `distlock torture --json` and returns its report.
fn torture(url: &str, faults: &str) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["torture", "--url", url, "--faults", faults])
        .args(["--duration", "5s", "--lease", "1s", "--json"])
        .output()
        .expect("running distlock torture");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "distlock torture --faults {faults} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    eprintln!("{report:#}");
    report
}

/// The cell of `fault`, checked for what every applicable cell must show.
fn cell<'a>(report: &'a serde_json::Value, fault: &str) -> &'a serde_json::Value {
    let cell = report["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["fault"] == fault)
        .unwrap_or_else(|| panic!("no {fault} cell: {report}"));
    assert_eq!(cell["stale_writes_accepted"], 0, "{cell}");
    assert_eq!(cell["token_regressions"], 0, "{cell}");
    assert!(cell["acquisitions"].as_u64().unwrap() > 0, "{cell}");
    cell
}

/// A kill was injected and the lock was taken again afterwards; a stop let a second holder in
/// (the control counter lost an update or the holds overlapped) and the fence refused the
/// stale holder's write or the holds show it.
fn check_kill_and_stop(report: &serde_json::Value) {
    let kill = cell(report, "kill");
    assert!(kill["faults_injected"].as_u64().unwrap() > 0, "{kill}");
    assert!(kill["max_recovery_ms"].as_u64().is_some(), "{kill}");
    assert_eq!(kill["verdict"], "OK", "{kill}");
    let stop = cell(report, "stop");
    assert!(stop["faults_injected"].as_u64().unwrap() > 0, "{stop}");
    assert!(
        stop["lost_updates"].as_u64().unwrap() > 0
            || stop["overlapping_holders"].as_u64().unwrap() > 0,
        "stop not exercised: {stop}"
    );
    assert_eq!(stop["verdict"], "OK", "{stop}");
}

#[test]
fn sqlite_under_kill_and_stop_and_no_proxy_faults() {
    let store = common::sqlite();
    let report = torture(&store.url, "kill,stop,reset");
    assert_eq!(report["backend"], "sqlite");
    check_kill_and_stop(&report);
    let reset = report["cells"][2].clone();
    assert_eq!(reset["verdict"], "not applicable", "{reset}");
}

#[test]
fn redis_under_kill_stop_and_reset_through_the_proxy() {
    let Some(redis) = common::servers("distlock torture")
        .into_iter()
        .find(|s| s.name == "redis")
    else {
        return;
    };
    let report = torture(&redis.url, "kill,stop,reset");
    assert_eq!(report["backend"], "redis");
    check_kill_and_stop(&report);
    let reset = cell(&report, "reset");
    assert!(reset["faults_injected"].as_u64().unwrap() > 0, "{reset}");
    assert_eq!(reset["verdict"], "OK", "{reset}");
}

#[test]
fn an_unreachable_server_fails_naming_it_without_its_password() {
    let out = Command::new(BIN)
        .args(["torture", "--url", "redis://:hunter2@127.0.0.1:1"])
        .args(["--faults", "kill", "--duration", "1s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
    assert!(stderr.to_lowercase().contains("redis"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[test]
fn bad_arguments_exit_64_with_one_line() {
    for args in [
        &["--faults", "flood"][..],
        &["--processes", "3", "--workers", "2"][..],
        &["--lease", "10ms"][..],
    ] {
        let out = Command::new(BIN)
            .args(["torture", "--url", "sqlite:/nonexistent/x.db"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
    }
}
