//! [`Guard`]: proof of holding a lock, with its fencing token and lost signal.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tracing::Instrument;

use crate::core::lease::HeldLease;
use crate::core::{Engine, Finishing};
use crate::error::{Error, ErrorKind, Result};
use crate::types::{FencingToken, LockKind, LockName};

/// One hold of a lock. While it lives (and renewal is on) its lease is renewed every lease/3.
///
/// A guard stands for one exact *holding*: the take that drew its fencing token. Release,
/// renewal and re-entry act on that holding only, never on a later one of the same owner, and
/// the guard reports its loss no later than the end of its last confirmed lease, by its own
/// clock ([`is_lost`](Guard::is_lost), [`lost`](Guard::lost)).
///
/// Release it with [`release`](Guard::release) to learn whether it was still held. Dropping it
/// releases in the background instead: the release is queued on the runtime, not immediate.
/// On a current-thread runtime (`#[tokio::test]`, `flavor = "current_thread"`), which may stop
/// as soon as the guard's task returns and drop the queued release unrun, distlock's own
/// release thread does it then, through a second connection to the store, before the runtime
/// has finished stopping: the lock is freed all the same. Session holdings (SQL
/// `?lock=session`, etcd, ZooKeeper) are freed on the caller's runtime only; if that runtime
/// stops first, they end with their connection or session.
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> distlock::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let client = distlock::connect(&format!("sqlite:{}", dir.path().join("locks.db").display())).await?;
/// # async fn write_with(_token: u64) -> distlock::Result<()> { Ok(()) }
/// let guard = client.lock("payment:981").acquire().await?;
/// tokio::select! {
///     done = write_with(guard.fencing_token().get()) => done?,
///     lost = guard.lost() => return Err(lost), // stop: the lock may be someone else's now
/// }
/// if !guard.release().await? {
///     // the lease had been lost before the release: the work may have overlapped another holder
/// }
/// # Ok(()) }
/// ```
#[must_use = "dropping a guard releases the lock at once (in the background)"]
pub struct Guard {
    engine: Arc<Engine>,
    lease: Arc<HeldLease>,
    released: bool,
}

impl Guard {
    pub(crate) fn new(engine: Arc<Engine>, lease: Arc<HeldLease>) -> Self {
        Guard {
            engine,
            lease,
            released: false,
        }
    }

    /// The fencing token of this holding: larger than that of every earlier holder of the name.
    /// Re-entering a lock keeps its token.
    pub fn fencing_token(&self) -> FencingToken {
        self.lease.token
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.lease.req.name
    }

    /// Which flavour of lock this guard holds.
    pub fn kind(&self) -> LockKind {
        self.lease.req.kind
    }

    /// Resolves (with an [`ErrorKind::LeaseLost`] error saying why) once the lease is lost:
    /// the end of the last lease the store confirmed has passed by this process's clock (renewal
    /// failed or was late, the process was paused, or renewal is off), the store says the lock
    /// is no longer ours, or the store ended the holder's session. It never waits for the store
    /// to report what the clock already tells.
    ///
    /// Race it against the protected work with `tokio::select!`. The future does not borrow the
    /// guard.
    pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        self.lease.lost()
    }

    /// True once the holding is lost (see [`lost`](Guard::lost)): checked against the clock on
    /// every call, so a process resuming after a pause past its lease sees `true` at once.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// The instant, by this process's monotonic clock, at which the holding ends unless the
    /// store confirms it again: the end of the last lease the store confirmed (each renewal
    /// moves it on), counted from when that request was sent, so a store whose clock runs true
    /// ends it later, never sooner. Past it the holding is lost, whether or not anything was heard.
    /// `None` for a holding that ends only with its connection (SQL `?lock=session`).
    ///
    /// Useful before a step that must finish inside the lease: check that enough of it is left,
    /// and fence the write anyway (a pause after the check is not seen by it).
    pub fn valid_until(&self) -> Option<std::time::Instant> {
        self.lease.ends_at().map(tokio::time::Instant::into_std)
    }

    /// Takes the same lock once more, as the same owner, without waiting: the new guard shares
    /// this one's holding, lease and token, and the lock is free again only when every guard is
    /// released. The store is asked to confirm that this exact holding is still ours (which
    /// restarts its lease); if it is not — the lease ended, the lock was taken — the answer is
    /// [`ErrorKind::LeaseLost`] and nothing is taken.
    ///
    /// # Cancel Safety
    ///
    /// Dropping the future before it finishes adds no hold.
    pub async fn reenter(&self) -> Result<Guard> {
        let span = tracing::debug_span!(
            "distlock.reenter",
            backend = self.engine.backend.name(),
            lock = %self.name(),
            token = self.fencing_token().get(),
        );
        if self.engine.reenter(&self.lease).instrument(span).await? {
            return Ok(Guard::new(self.engine.clone(), self.lease.clone()));
        }
        Err(Error::new(
            ErrorKind::LeaseLost,
            format!(
                "lock {:?} could not be re-entered: this holding is no longer ours",
                self.name()
            ),
        )
        .with_backend(self.engine.backend.name()))
    }

    /// Releases this hold. `Ok(true)` if the holding was still ours; `Ok(false)` if it had
    /// been lost (nothing is changed in the store then: someone else's lock, or a newer holding
    /// of the same owner, is never touched).
    ///
    /// # Cancel Safety
    ///
    /// If the future is dropped before it finishes, the release goes on in the background (as a
    /// dropped guard's does; [`crate::Client::flush`] waits for it), so the lock is freed all
    /// the same.
    pub async fn release(mut self) -> Result<bool> {
        self.released = true;
        let (engine, lease) = (self.engine.clone(), self.lease.clone());
        Finishing::new(
            self.engine.clone(),
            async move { engine.release(&lease).await },
        )
        .await
    }

    /// Forgets this guard without releasing it: the holding stays in the store until its lease
    /// ends (renewal stops once no other guard shares it). For hand-overs to another process
    /// that knows the owner token ([`crate::Lock::release`]).
    pub fn leak(mut self) {
        self.released = true;
        self.lease.leak_hold();
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.engine.release_dropped(self.lease.clone());
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("name", self.name())
            .field("kind", &self.kind())
            .field("fencing_token", &self.fencing_token())
            .field("lost", &self.is_lost())
            .finish()
    }
}
