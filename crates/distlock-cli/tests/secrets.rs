//! Issue #8, item 7: no form of a password in a store URL reaches distlock's output, and each
//! cause of an error is printed once. Every scheme, every way to put a secret in a URL, through
//! `exec`, `elect`, `leader`, `bench` and `demo`, against closed ports and against the real servers with wrong
//! credentials.

mod common;

use std::process::Command;

use common::BIN;

const SECRET: &str = "s3cretPW";

/// Ways to put [`SECRET`] in a URL: `{u}` is the user name, `{hp}` host:port and `{db}` the
/// database. The ones with an unencoded `/` or `?` in the password are URLs the drivers cannot
/// even parse.
const FORMS: &[&str] = &[
    "{u}:s3cretPW@{hp}/{db}",
    "{u}:s3cret%50W@{hp}/{db}",
    "{u}:s3cretPW/x@{hp}/{db}",
    "{u}:s3?cretPW@{hp}/{db}",
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
    let out = Command::new(BIN)
        .args(args)
        .env_remove("DISTLOCK_URL")
        .env("DISTLOCK_LOG", "error")
        .output()
        .expect("run distlock");
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
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
fn elect_and_leader_never_print_a_password() {
    for url in urls("secrets through elect and leader") {
        check(
            &url,
            &[
                "elect", "--url", &url, "--lease", "1s", "secrets", "--", "true",
            ],
        );
        check(&url, &["leader", "--url", &url, "secrets"]);
    }
}

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
#[test]
fn demo_never_prints_a_password() {
    let urls: Vec<String> = urls("secrets through demo")
        .into_iter()
        .filter(|u| u.contains("?password="))
        .collect();
    for url in &urls {
        let run = [
            "demo",
            "--strategy",
            "lock",
            "--scenario",
            "stock",
            "-k",
            "1",
            "-n",
            "4",
        ];
        check(url, &[&run[..], &["-c", "1", "--lock-url", url]].concat());
    }
    for url in urls
        .iter()
        .filter(|u| u.starts_with("postgres") || u.starts_with("mysql"))
    {
        let run = [
            "demo",
            "--strategy",
            "none",
            "--scenario",
            "stock",
            "-k",
            "1",
            "-n",
            "4",
        ];
        check(url, &[&run[..], &["--store", url]].concat());
    }
}
