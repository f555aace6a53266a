//! What `ErrorKind`'s and `Error`'s docs promise for cases no store changes, each shown against
//! the embedded SQLite store (the default feature). The stores' own cases (a server that cannot
//! be reached, a quorum not met, a lease shorter than a server keeps) are proved by each store's
//! suite against its real server.

use std::error::Error as _;
use std::time::Duration;

use distlock::{Client, Error, ErrorKind, OwnerToken};

/// A client of a fresh SQLite file, kept with the directory holding it.
async fn sqlite() -> (Client, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite:{}", dir.path().join("locks.db").display());
    let client = distlock::connect(&url).await.expect("SQLite opens");
    (client, dir)
}

fn kind_of<T>(outcome: &distlock::Result<T>) -> Option<ErrorKind> {
    outcome.as_ref().err().map(Error::kind)
}

const EVERY_KIND: [ErrorKind; 12] = [
    ErrorKind::InvalidName,
    ErrorKind::InvalidLease,
    ErrorKind::InvalidUrl,
    ErrorKind::InvalidInput,
    ErrorKind::Timeout,
    ErrorKind::NotHeld,
    ErrorKind::LeaseLost,
    ErrorKind::Unsupported,
    ErrorKind::Connection,
    ErrorKind::Backend,
    ErrorKind::NoQuorum,
    ErrorKind::StaleToken,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_input_for_an_empty_multi_lock() {
    let (client, _dir) = sqlite().await;
    let none: [&str; 0] = [];
    let multi = client.multi_lock(none);
    let taken = multi.try_acquire().await;
    assert_eq!(kind_of(&taken), Some(ErrorKind::InvalidInput), "{taken:?}");
    let message = taken.err().map(|e| e.message().to_string());
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("at least one name")),
        "{message:?}"
    );
    let waited = multi.acquire_timeout(Duration::from_secs(1)).await;
    assert_eq!(
        kind_of(&waited),
        Some(ErrorKind::InvalidInput),
        "{waited:?}"
    );
    let checked = multi.check();
    assert_eq!(kind_of(&checked), Some(ErrorKind::InvalidInput));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_input_for_zero_permits() {
    let (client, _dir) = sqlite().await;
    let zero = client.semaphore("jobs", 0);
    // Not Unsupported: the store does keep semaphores, the request itself makes no sense.
    assert!(client.supports(distlock::LockKind::Permit { permits: 2 }));
    let taken = zero.try_acquire().await;
    assert_eq!(kind_of(&taken), Some(ErrorKind::InvalidInput), "{taken:?}");
    let waited = zero.acquire_timeout(Duration::from_secs(1)).await;
    assert_eq!(
        kind_of(&waited),
        Some(ErrorKind::InvalidInput),
        "{waited:?}"
    );
    let resized = client.set_semaphore_permits("jobs", 0).await;
    assert_eq!(
        kind_of(&resized),
        Some(ErrorKind::InvalidInput),
        "{resized:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_name_for_an_empty_long_or_control_character_name() {
    let (client, _dir) = sqlite().await;
    let long = "n".repeat(513);
    for name in ["", long.as_str(), "line\nbreak", "bell\u{7}"] {
        let taken = client.lock(name).try_acquire().await;
        assert_eq!(kind_of(&taken), Some(ErrorKind::InvalidName), "{name:?}");
    }
    accepted(client.lock("n".repeat(512)), "512 bytes").await;
}

/// The bound itself is accepted: the lock is taken and released.
async fn accepted(lock: distlock::Lock, what: &str) {
    let guard = lock.try_acquire().await.expect(what).expect("a free lock");
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_lease_outside_10ms_to_24h() {
    let (client, _dir) = sqlite().await;
    for lease in [
        Duration::ZERO,
        Duration::from_millis(9),
        Duration::from_secs(24 * 3600) + Duration::from_millis(1),
    ] {
        let taken = client.lock("lease").lease(lease).try_acquire().await;
        assert_eq!(kind_of(&taken), Some(ErrorKind::InvalidLease), "{lease:?}");
    }
    let day = client.lock("lease").lease(Duration::from_secs(24 * 3600));
    accepted(day, "a lease of exactly 24 h").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_url_for_a_malformed_url_or_unknown_scheme() {
    for url in ["", "nonsense", "ftp://host/x", "sqlite", "://nothing"] {
        let err = distlock::connect(url).await.map(drop).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidUrl, "{url:?}: {err}");
    }
}

/// The scheme of a store this build lacks is `Unsupported`, not `InvalidUrl`, and the message
/// names the cargo feature to enable. Only the schemes whose feature is off in this build are
/// asked (with every feature on, there are none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_for_a_store_this_build_lacks_naming_its_feature() {
    let schemes = [
        ("redis://127.0.0.1:1", "redis"),
        ("redis-cluster://127.0.0.1:1", "redis"),
        ("redis-sentinel://127.0.0.1:1/m", "redis"),
        ("redlock://h:1,h:2,h:3", "redlock"),
        ("postgres://127.0.0.1:1/db", "postgres"),
        ("mysql://127.0.0.1:1/db", "mysql"),
        ("etcd://127.0.0.1:1", "etcd"),
        ("zk://127.0.0.1:1", "zookeeper"),
        ("memcached://127.0.0.1:1", "memcached"),
        ("s3://bucket", "object-store"),
        ("az://container", "object-store"),
        ("memory:", "memory"),
    ];
    for (url, feature) in schemes {
        if built(feature) {
            continue;
        }
        let err = distlock::connect(url).await.map(drop).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{url}: {err}");
        let wanted = format!("features = [\"{feature}\"]");
        assert!(err.message().contains(&wanted), "{url}: {err}");
    }
}

/// Whether this build of the tests has the store of `feature`.
fn built(feature: &str) -> bool {
    match feature {
        "redis" => cfg!(feature = "redis"),
        "redlock" => cfg!(feature = "redlock"),
        "postgres" => cfg!(feature = "postgres"),
        "mysql" => cfg!(feature = "mysql"),
        "etcd" => cfg!(feature = "etcd"),
        "zookeeper" => cfg!(feature = "zookeeper"),
        "memcached" => cfg!(feature = "memcached"),
        "memory" => cfg!(feature = "memory"),
        "object-store" => cfg!(feature = "object-store"),
        other => panic!("no store feature {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_held_for_a_release_by_an_owner_that_does_not_hold_the_lock() {
    let (client, _dir) = sqlite().await;
    let held = client.lock("report").acquire().await.unwrap();
    // Without an owner token there is nothing to release by.
    let anonymous = client.lock("report").release().await;
    assert_eq!(
        kind_of(&anonymous),
        Some(ErrorKind::NotHeld),
        "{anonymous:?}"
    );
    let stranger = client
        .lock("report")
        .owner(OwnerToken::random())
        .release()
        .await;
    assert_eq!(kind_of(&stranger), Some(ErrorKind::NotHeld), "{stranger:?}");
    assert!(stranger.unwrap_err().is_not_held());
    // The holder's lock was left as it was.
    assert!(client.lock("report").try_acquire().await.unwrap().is_none());
    assert!(held.release().await.unwrap());
}

/// A guard's release of a holding it lost is no error: `Ok(false)`, not `NotHeld`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_released_after_losing_its_holding_answers_false_not_not_held() {
    let (client, _dir) = sqlite().await;
    let held = client.lock("report").acquire().await.unwrap();
    client
        .force_release("report", distlock::LockKind::Mutex)
        .await
        .unwrap();
    assert_eq!(held.release().await.ok(), Some(false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_when_a_lock_wait_reaches_its_deadline() {
    let (client, _dir) = sqlite().await;
    let held = client.lock("busy").acquire().await.unwrap();
    let waited = client
        .lock("busy")
        .acquire_timeout(Duration::from_millis(100))
        .await;
    assert_eq!(kind_of(&waited), Some(ErrorKind::Timeout), "{waited:?}");
    let err = waited.unwrap_err();
    assert!(err.is_timeout() && err.is_retryable(), "{err}");
    assert!(held.release().await.unwrap());
}

/// `backend()` is `""` for bad input the core refuses before any store is asked, and the
/// store's name for what the store answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_is_empty_for_bad_input_and_names_the_store_otherwise() {
    let (client, _dir) = sqlite().await;
    let bad_name = client.lock("").try_acquire().await.unwrap_err();
    assert_eq!(bad_name.backend(), "", "{bad_name}");
    let bad_lease = client
        .lock("x")
        .lease(Duration::ZERO)
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(bad_lease.backend(), "", "{bad_lease}");
    let held = client.lock("x").acquire().await.unwrap();
    let not_held = client
        .lock("x")
        .owner(OwnerToken::random())
        .release()
        .await
        .unwrap_err();
    assert_eq!(not_held.backend(), "sqlite", "{not_held}");
    assert!(not_held.to_string().starts_with("lock not held (sqlite): "));
    assert!(held.release().await.unwrap());
}

#[test]
fn as_str_is_the_kind_in_snake_case() {
    let names: Vec<&str> = EVERY_KIND.iter().map(|k| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "invalid_name",
            "invalid_lease",
            "invalid_url",
            "invalid_input",
            "timeout",
            "not_held",
            "lease_lost",
            "unsupported",
            "connection",
            "backend",
            "no_quorum",
            "stale_token",
        ]
    );
}

#[test]
fn retryable_are_exactly_timeout_connection_and_no_quorum() {
    for kind in EVERY_KIND {
        let retryable = Error::new(kind, "x").is_retryable();
        let expected = matches!(
            kind,
            ErrorKind::Timeout | ErrorKind::Connection | ErrorKind::NoQuorum
        );
        assert_eq!(retryable, expected, "{kind:?}");
    }
}

#[test]
fn each_predicate_is_true_for_its_kind_only() {
    for kind in EVERY_KIND {
        let e = Error::new(kind, "x");
        assert_eq!(e.is_timeout(), kind == ErrorKind::Timeout, "{kind:?}");
        assert_eq!(e.is_not_held(), kind == ErrorKind::NotHeld, "{kind:?}");
        assert_eq!(
            e.is_stale_token(),
            kind == ErrorKind::StaleToken,
            "{kind:?}"
        );
    }
}

/// `new`, `with_backend` and `with_source` keep what they are given; `Display` shows the kind,
/// the backend and the message but not the source, which `source()` and `chain` show once.
#[test]
fn display_shows_kind_backend_and_message_but_not_the_source() {
    let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused by peer");
    let e = Error::new(ErrorKind::Connection, "connecting to 127.0.0.1:1")
        .with_backend("redis")
        .with_source(cause);
    assert_eq!(e.kind(), ErrorKind::Connection);
    assert_eq!(e.backend(), "redis");
    assert_eq!(e.message(), "connecting to 127.0.0.1:1");
    assert_eq!(
        e.to_string(),
        "connection failure (redis): connecting to 127.0.0.1:1"
    );
    assert_eq!(
        e.source().map(ToString::to_string).as_deref(),
        Some("refused by peer")
    );
    assert_eq!(
        distlock::error::chain(&e),
        "connection failure (redis): connecting to 127.0.0.1:1: refused by peer"
    );
    // Without a backend or a message, nothing empty is shown.
    assert_eq!(
        Error::new(ErrorKind::Timeout, "").to_string(),
        "timed out waiting"
    );
    assert_eq!(
        Error::new(ErrorKind::NotHeld, "lock \"a\" is not held").to_string(),
        "lock not held: lock \"a\" is not held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn display_never_shows_a_url_password() {
    for url in [
        "ftp://app:hunter2@host/x",
        "locks://app:hunter2@host:1/x?timeout=1s",
    ] {
        let err = distlock::connect(url).await.map(drop).unwrap_err();
        let shown = format!("{err} {err:?} {}", distlock::error::chain(&err));
        assert!(!shown.contains("hunter2"), "{url}: {shown}");
    }
}
