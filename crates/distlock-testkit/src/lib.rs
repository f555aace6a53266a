//! The conformance suite every distlock backend runs against its real store, and the tools it
//! uses: child processes that hold, crash and pause ([`child`]), a TCP proxy that delays,
//! blackholes or resets a client's traffic ([`faults`]), a resource that checks fencing
//! tokens ([`fenced`]), the checker of recorded holds for overlaps and token order ([`history`],
//! also used by `distlock bench`), private servers a test may stop and start ([`servers`]),
//! the workloads of failover tests on replicated stores ([`failover`]), this process's
//! connections ([`sockets`]), to have the server end exactly a client's sessions,
//! and Apache Curator as another holder of a ZooKeeper lock ([`curator`]) running a
//! critical-section protocol that catches any two holders inside at once ([`section`]).
//!
//! A backend's test file is a few lines (with `harness = false` in Cargo.toml):
//!
//! ```no_run
//! fn main() -> std::process::ExitCode {
//!     distlock_testkit::Suite::new("sqlite", "SQLite file", "sqlite:/tmp/x.db".to_string())
//!         .run()
//! }
//! ```
//!
//! Every case becomes a named test (`mutex::exclusion_across_processes`, …) with the usual test
//! runner output and filters. A store that cannot be reached fails every case with a message
//! naming the server and how to start it; `DISTLOCK_SKIP=<backend,…>` skips a backend on purpose
//! and the run says so.
//!
//! Store faults need the test file's help, given to the suite as hooks:
//! [`Suite::private_store`] (a store of the case's own to restart) and [`Suite::end_sessions`]
//! (the server ends given client connections). A backend without a hook has the cases that need
//! it marked not applicable, and the run says so.

pub mod cases;
pub mod certs;
pub mod child;
pub mod curator;
pub mod failover;
pub mod flavour;
pub mod section;
pub mod servers;
pub mod suite;

pub use suite::{Ctx, Flavour, Suite};

// The fault injection, the fenced file and the history checker live in distlock-harness, which
// the `distlock` command uses too; they are re-exported under their old paths.
pub use distlock_harness::{faults, fenced, history, monotonic_ns, sockets};

use std::fmt;

use distlock::{Lease, LockKind, LockName, LockRequest, OwnerToken};

/// Why a case failed: a message for the test output.
pub struct Failure(pub String);

// With every cause on the line: a store's own words ("etcdserver: request timed out") are what
// tell a failure under load from a defect.
impl<E: std::error::Error + 'static> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure(distlock::error::chain(&e))
    }
}

impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Failure> for distlock_harness::Failure {
    fn from(f: Failure) -> Self {
        distlock_harness::Failure(f.0)
    }
}

/// Whether `DISTLOCK_SKIP` (a comma-separated list, any case) names `backend`, which skips the
/// tests of that store on purpose; a skip is printed, naming `what` was skipped.
pub fn skipped(backend: &str, what: &str) -> bool {
    let skip = std::env::var("DISTLOCK_SKIP").unwrap_or_default();
    let skipped = skip
        .split(',')
        .any(|s| s.trim().eq_ignore_ascii_case(backend));
    if skipped {
        eprintln!("SKIPPED: {what}, because DISTLOCK_SKIP={skip}");
    }
    skipped
}

/// What a case returns.
pub type Outcome = Result<(), Failure>;

/// Fails the case with a formatted message unless `cond` holds.
#[macro_export]
macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::Failure(format!($($fmt)+)));
        }
    };
}

/// Fails unless `new` (a fencing token, an election term) is above `old`; the message says
/// `what` they are ("the token after a crashed holder's").
pub fn check_above<T: Ord + fmt::Display>(what: &str, new: T, old: T) -> Outcome {
    check!(new > old, "{what}: {new} is not above {old}");
    Ok(())
}

/// Fails saying `what` happened unless a try of `lock` finds it taken.
pub async fn check_taken(lock: &distlock::Lock, what: &str) -> Outcome {
    match lock.try_acquire().await? {
        None => Ok(()),
        Some(_) => Err(Failure(what.to_string())),
    }
}

/// Holds lock `name` through `ours` (a 5 s lease) and checks that `other`, a client of the same
/// store opened another way, finds it taken, then free once released; `how` says how `ours` was
/// opened ("the typed configuration"), in failures.
pub async fn check_shared_store(
    ours: &distlock::Client,
    other: &distlock::Client,
    name: &str,
    how: &str,
) -> Outcome {
    let lease = std::time::Duration::from_secs(5);
    let guard = ours.lock(name).lease(lease).acquire().await?;
    let taken = format!("the other client took the lock held through {how}");
    check_taken(&other.lock(name), &taken).await?;
    check!(guard.release().await?, "the holding through {how} was lost");
    let next = other.lock(name).try_acquire().await?;
    check!(
        next.is_some(),
        "the lock was not free after the release through {how}"
    );
    Ok(())
}

/// `a` holds lock `name` now: `b` finds it held, and a waiter on `b` gets it once `a` lets go,
/// well within its 10 s (a store that wakes waiters, by pub/sub or by asking every 100 ms; 10 s
/// leaves a loaded machine room); `a` then finds the waiter's hold.
pub async fn check_handed_over(a: &distlock::Client, b: &distlock::Client, name: &str) -> Outcome {
    use std::time::Duration;
    let held = a.lock(name).acquire().await?;
    check_taken(&b.lock(name), "the second client took a held lock").await?;
    let waiter = tokio::spawn({
        let lock = b.lock(name);
        async move { lock.acquire_timeout(Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await?;
    let released = std::time::Instant::now();
    let taken = waiter.await.map_err(|e| Failure(e.to_string()))??;
    // Woken, not timed out: the holder's 30 s lease would have kept a waiter relying on its
    // timer past 5 s.
    let after = released.elapsed();
    check!(
        after < Duration::from_secs(5),
        "the waiter took {after:?} after the release"
    );
    check_taken(&a.lock(name), "the waiter's hold is not seen").await?;
    taken.release().await?;
    Ok(())
}

/// Fails unless `answer` is an error of `kind`; `what` says what answered, in the failure.
pub fn check_kind<T: fmt::Debug>(
    answer: &distlock::Result<T>,
    kind: distlock::ErrorKind,
    what: &str,
) -> Outcome {
    check!(
        matches!(answer, Err(e) if e.kind() == kind),
        "{what} answered {answer:?}, not {kind:?}"
    );
    Ok(())
}

/// Fails unless `answer` is an error of `kind` whose message does not show `secret` (a
/// password the request carried).
pub fn check_refused_hiding<T>(
    answer: distlock::Result<T>,
    kind: distlock::ErrorKind,
    secret: &str,
) -> Outcome {
    let Err(err) = answer else {
        return Err(Failure(format!("succeeded, not refused with {kind:?}")));
    };
    check!(err.kind() == kind, "{err:?}");
    check!(!err.to_string().contains(secret), "{err}");
    Ok(())
}

/// What `fut` gives if it finishes within `limit`; otherwise fails saying `what` did not happen
/// within it.
pub async fn within<F: std::future::Future>(
    limit: std::time::Duration,
    fut: F,
    what: &str,
) -> Result<F::Output, Failure> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| Failure(format!("{what}: not within {limit:?}")))
}

/// What the spawned task `task` returned, if it finished within `limit`; otherwise fails saying
/// `what` did not happen within it (or how the task failed).
pub async fn joined<T>(
    limit: std::time::Duration,
    task: tokio::task::JoinHandle<T>,
    what: &str,
) -> Result<T, Failure> {
    within(limit, task, what)
        .await?
        .map_err(|e| Failure(format!("{what}: {e}")))
}

/// A task acquiring `lock`, waiting at most `within`: its answer, once joined.
pub fn acquiring(
    lock: distlock::Lock,
    within: std::time::Duration,
) -> tokio::task::JoinHandle<distlock::Result<distlock::Guard>> {
    tokio::spawn(async move { lock.acquire_timeout(within).await })
}

/// A request for the exclusive lock `name` by a new owner, with `lease`: for cases that call a
/// backend's methods themselves (`client.backend().try_take(…)`).
pub fn mutex_request(name: &str, lease: std::time::Duration) -> Result<LockRequest, Failure> {
    Ok(LockRequest::new(
        LockName::new(name)?,
        LockKind::Mutex,
        OwnerToken::random(),
        Lease::new(lease)?,
    ))
}
