//! Issue #8, item 7: no form of a password in a store URL reaches distlock's output, and each
//! cause of an error is printed once. Every scheme, every way to put a secret in a URL, through
//! `exec`, `status`, `serve`, `elect`, `leader`, `bench` and `demo`, against closed ports and
//! against the real servers with wrong credentials.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;

use distlock_testkit::servers::{Persistence, start_redis_with_args};

const SECRET: &str = "s3cretPW";

/// Ways to put [`SECRET`] in a URL: `{u}` is the user name, `{hp}` host:port and `{db}` the
/// database. A password may hold an unencoded `@`, `:`, `/`, `?` or `#` (issue #32): the
/// user-info runs to the last `@`, so each piece of it must stay hidden.
const FORMS: &[&str] = &[
    "{u}:s3cretPW@{hp}/{db}",
    "{u}:s3cret%50W@{hp}/{db}",
    "{u}:s3cretPW/x@{hp}/{db}",
    "{u}:s3?cretPW@{hp}/{db}",
    "{u}:s3@cretPW/x@{hp}/{db}",
    "{u}:s3cretPW:s3cretPW@s3cretPW@{hp}/{db}",
    "{u}:s3cretPW#s3cretPW@s3cretPW@{hp}/{db}",
    "{u}:s3cretPW?s3cretPW@s3cretPW/s3cretPW@{hp}/{db}",
    "{u}@{hp}/{db}?password=s3cretPW",
    "{u}@{hp}/{db}?sslmode=disable&sslpassword=s3cretPW",
    "{u}@{hp}/{db}?pass=s3cretPW",
    "{u}@{hp}/{db}?PassWord=s3cretPW",
    "{u}@{hp}/{db}?pass%77ord=s3cretPW",
    "{u}@{hp}/{db}?ssl-key-password=s3cretPW&token=s3cretPW&auth=s3cretPW",
    "{u}@{hp}/{db}#s3cretPW",
];

/// One URL scheme to try.
struct Scheme {
    scheme: &'static str,
    user: &'static str,
    database: &'static str,
    /// The server's host:port and its name in DISTLOCK_SKIP, for the wrong-credentials runs.
    server: Option<(&'static str, &'static str)>,
}

/// A port nothing listens on.
const CLOSED: &str = "127.0.0.1:1";

const SCHEMES: &[Scheme] = &[
    Scheme {
        scheme: "redis",
        user: "default",
        database: "0",
        server: Some(("127.0.0.1:6379", "redis")),
    },
    Scheme {
        scheme: "rediss",
        user: "default",
        database: "0",
        server: None,
    },
    // Trust authentication lets any existing role in: a role that does not exist is refused.
    Scheme {
        scheme: "postgres",
        user: "nosuchrole",
        database: "distlock_test",
        server: Some(("127.0.0.1:5432", "postgres")),
    },
    Scheme {
        scheme: "postgresql",
        user: "nosuchrole",
        database: "distlock_test",
        server: None,
    },
    Scheme {
        scheme: "mysql",
        user: "root",
        database: "distlock_test",
        server: Some(("127.0.0.1:3306", "mysql")),
    },
    Scheme {
        scheme: "mariadb",
        user: "root",
        database: "distlock_test",
        server: None,
    },
];

/// Every URL to try, with a label: each form on each scheme's closed port, on each server not
/// skipped, and SQLite's only form (a query parameter, which it ignores).
fn urls(what: &str) -> Vec<String> {
    let servers: Vec<&str> = common::servers(what).iter().map(|s| s.name).collect();
    let mut urls = Vec::new();
    for s in SCHEMES {
        let mut places = vec![CLOSED];
        if let Some((open, name)) = s.server
            && servers.contains(&name)
        {
            places.push(open);
        }
        for hp in places {
            for form in FORMS {
                let rest = form
                    .replace("{u}", s.user)
                    .replace("{hp}", hp)
                    .replace("{db}", s.database);
                urls.push(format!("{}://{rest}", s.scheme));
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("distlock-secrets-{}", common::unique()));
    urls.push(format!("sqlite:{}?password={SECRET}", dir.display()));
    urls
}

/// Runs distlock with `args`, and checks its whole output for the secret and repeated causes.
fn check(url: &str, args: &[&str]) {
    let out = common::distlock(args)
        .env("DISTLOCK_LOG", "error")
        .output()
        .expect("run distlock");
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    check_shown(url, args, &shown);
}

/// Checks what distlock showed for the secret and repeated causes.
fn check_shown(url: &str, args: &[&str], shown: &str) {
    for secret in [SECRET, "s3cret%50W", "cretPW"] {
        assert!(
            !shown.contains(secret),
            "{url}: {args:?} printed the password:\n{shown}"
        );
    }
    for cause in ["Connection refused", "Access denied", "does not exist"] {
        for line in shown.lines() {
            assert!(
                line.matches(cause).count() <= 1,
                "{url}: {args:?} repeats {cause:?}:\n{line}"
            );
        }
    }
}

#[test]
fn exec_never_prints_a_password() {
    for url in urls("secrets through exec") {
        check(
            &url,
            &["exec", "--url", &url, "--no-wait", "secrets", "--", "true"],
        );
    }
}

#[test]
fn status_never_prints_a_password() {
    for url in urls("secrets through status") {
        check(&url, &["status", "--url", &url, "secrets"]);
        check(&url, &["status", "--url", &url, "--json", "secrets"]);
    }
}

/// `serve` stops at start when the store cannot be reached; when it can (a Redis without a
/// password takes any), its page and JSON, which show the URL, are read too before SIGTERM.
#[test]
fn serve_never_prints_a_password() {
    for url in urls("secrets through serve") {
        let args = ["serve", "--url", &url, "--listen", "127.0.0.1:0"];
        let mut child = common::distlock(&args)
            .env("DISTLOCK_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run distlock serve");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut shown = String::new();
        stdout.read_line(&mut shown).expect("read serve's stdout");
        if let Some(base) = shown.trim().strip_prefix("listening on http://") {
            let authority = base.trim_end_matches('/').to_string();
            for path in ["/api/locks", "/"] {
                shown.push_str(&common::http_get(&authority, path));
            }
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        }
        let status = child.wait().expect("wait for serve");
        stdout.read_to_string(&mut shown).expect("stdout");
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut shown)
            .expect("stderr");
        assert!(status.code().is_some(), "{url}: serve died of {status:?}");
        check_shown(&url, &args, &shown);
    }
}

/// The password in the forms above is the password: a Redis that requires one holding `@`,
/// `:`, `/`, `?` and `#` lets `exec`, `status` and `elect` in with it written unencoded, and
/// refuses one letter off, neither run showing it.
#[test]
fn a_password_holding_at_signs_and_slashes_is_the_one_sent() {
    let password = "s3@cret:PW/x?y#z";
    let server = start_redis_with_args(Persistence::None, &["--requirepass", password])
        .unwrap_or_else(|e| panic!("{e:?}"));
    let url = format!("redis://:{password}@127.0.0.1:{}/0", server.port());
    let name = format!("secrets-{}", common::unique());
    for args in [
        &["exec", "--url", &url, "--no-wait", &name, "--", "true"][..],
        &["status", "--url", &url, "--prefix", &name],
        &["elect", "--url", &url, "--lease", "2s", &name, "--", "true"],
    ] {
        let out = common::run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        for piece in ["s3@cret", "cret:PW", "PW/x", "x?y", "y#z"] {
            assert!(
                !stderr.contains(piece),
                "{args:?} printed the password: {stderr}"
            );
        }
    }
    let wrong = url.replace("y#z", "y#Z");
    let out = common::run(&["exec", "--url", &wrong, "--no-wait", &name, "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(0),
        "a wrong password was let in: {stderr}"
    );
    // The URL as the store's configuration shows it: the password masked, the server named.
    assert!(stderr.contains(":***@127.0.0.1:"), "{stderr}");
    for piece in ["s3@cret", "cret:PW", "PW/x", "x?y", "y#Z"] {
        assert!(!stderr.contains(piece), "printed the password: {stderr}");
    }
}

/// `elect` tries an unreachable store until it is stopped, saying each failure: its runs, a
/// batch at a time, are given time for a few attempts, then SIGTERM, and all they said is
/// checked.
#[test]
fn elect_and_leader_never_print_a_password() {
    let urls = urls("secrets through elect and leader");
    for batch in urls.chunks(16) {
        let candidates: Vec<_> = batch
            .iter()
            .map(|url| {
                let args = [
                    "elect", "--url", url, "--lease", "1s", "secrets", "--", "true",
                ];
                let child = common::distlock(&args)
                    .env("DISTLOCK_LOG", "error")
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("run distlock elect");
                (url, child)
            })
            .collect();
        // Past the first pauses (250 ms, 500 ms): at least two attempts said.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        for (url, child) in candidates {
            // SAFETY: kill(2) on a child this test spawned and has not reaped (one that has
            // exited already is a zombie until the wait below, so the pid is still its own).
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let out = child.wait_with_output().expect("wait for distlock elect");
            let shown = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            check_shown(url, &["elect"], &shown);
        }
    }
    for url in &urls {
        check(url, &["leader", "--url", url, "secrets"]);
    }
}

#[cfg(feature = "tools")]
#[test]
fn bench_never_prints_a_password() {
    for url in urls("secrets through bench") {
        let args = [
            "bench",
            "--url",
            &url,
            "--workload",
            "contended",
            "--duration",
            "200ms",
        ];
        check(
            &url,
            &[&args[..], &["--workers", "1", "--processes", "1"]].concat(),
        );
    }
}

/// The demo's instances connect to the lock store themselves and report failures with their
/// stderr. Each demo run takes seconds, so one form per scheme and place: the others go through
/// the same `redact` as in the exec and bench tests.
#[cfg(feature = "tools")]
#[test]
fn demo_never_prints_a_password() {
    let urls: Vec<String> = urls("secrets through demo")
        .into_iter()
        .filter(|u| u.contains("?password="))
        .collect();
    // `demo --strategy STRATEGY` on the stock scenario, small, with `store` arguments.
    let demo = |url: &str, strategy: &str, store: &[&str]| {
        let run = ["demo", "--strategy", strategy, "--scenario", "stock"];
        check(url, &[&run[..], &["-k", "1", "-n", "4"], store].concat());
    };
    for url in &urls {
        demo(url, "lock", &["-c", "1", "--lock-url", url]);
    }
    for url in urls
        .iter()
        .filter(|u| u.starts_with("postgres") || u.starts_with("mysql"))
    {
        demo(url, "none", &["--store", url]);
    }
}
