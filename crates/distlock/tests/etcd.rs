//! The conformance suite against the real etcd (DISTLOCK_ETCD_URL, default
//! etcd://127.0.0.1:2379?ttl=3: a short session TTL so the crash cases wait seconds, not ten).

use std::time::Duration;

use distlock_testkit::Suite;

fn main() -> std::process::ExitCode {
    let url = std::env::var("DISTLOCK_ETCD_URL")
        .unwrap_or_else(|_| "etcd://127.0.0.1:2379?ttl=3".to_string());
    Suite::new("etcd", "etcd", url)
        // The session TTL of the URL above: a stopped or killed holder's lease ends by then.
        .session_expiry(Duration::from_secs(3))
        .run()
}
