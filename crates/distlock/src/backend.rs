//! The contract a store must meet: only what has to be atomic in the store.
//!
//! Everything else (waiting with a deadline, the watchdog, sharing one lease between reentrant
//! guards, the lost signal, releasing on drop, multi-locks) is written once in [`crate::core`]
//! and works the same over every backend.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::Stream;

use crate::error::{Error, Result};
use crate::types::{FencingToken, Lease, LockKind, LockName, OwnerToken};

/// A future that resolves once: "the store ended the session that held the lock".
pub type Signal = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A stream with one item per "the lock may be free now" notice from the store. Dropping it
/// stops listening.
pub type Wakeups = Pin<Box<dyn Stream<Item = ()> + Send + 'static>>;

/// What one call to the store is about: which lock, which flavour, who asks, for how long.
#[derive(Clone, Debug)]
pub struct LockRequest {
    /// The lock's name.
    pub name: LockName,
    /// Which synchronizer the name belongs to.
    pub kind: LockKind,
    /// Who asks (the secret that proves ownership).
    pub owner: OwnerToken,
    /// How long the store should keep the lock without renewal.
    pub lease: Lease,
}

/// The answer to [`Backend::try_take`].
pub enum Attempt {
    /// The caller holds the lock now (newly taken, or its own holding confirmed: same token).
    Acquired {
        /// The fencing token of this holding.
        token: FencingToken,
        /// For session-based stores: resolves when the store ends the session that holds the lock
        /// (a killed connection, an expired ZooKeeper session). `None` for lease-based stores,
        /// whose loss the watchdog detects.
        session_lost: Option<Signal>,
    },
    /// Someone else holds it.
    Held {
        /// How long the current holder's lease has left, if the store knows: the longest a waiter
        /// should sleep before trying again, so a lost notification costs at most one lease.
        retry_after: Option<Duration>,
    },
}

impl fmt::Debug for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attempt::Acquired { token, .. } => write!(f, "Acquired({token})"),
            Attempt::Held { retry_after } => write!(f, "Held({retry_after:?})"),
        }
    }
}

/// What a backend can do, so the core can refuse early and choose how to wait.
#[derive(Clone, Copy, Debug)]
pub struct Capabilities {
    /// The store tells waiters when a lock may be free ([`Backend::watch_free`] is meaningful);
    /// without it the core waits with a jittered backoff bounded by the holder's lease left.
    pub notifies: bool,
    /// Locks must be renewed by the watchdog (lease-based). Session-based stores set it false.
    pub renews: bool,
    /// Waiters hold a place in a queue in the store, which [`Backend::abandon`] must clear.
    pub queues: bool,
}

/// The atomic primitives a store supplies.
///
/// # Contract
///
/// * A *holding* is one take of a lock by one owner, named by the fencing token that take drew.
///   Re-entry is counted in the core, not in the store: the store keeps at most one holding per
///   owner and lock.
/// * [`try_take`](Backend::try_take) is one atomic step in the store: it takes the lock when it
///   is free or its lease has ended (bumping the fencing counter in the same step); when `owner`
///   already holds it, it restarts the lease and answers the same token (so a request whose reply
///   was lost can be sent again); otherwise it changes nothing and says how long the holder's
///   lease has left.
/// * [`extend`](Backend::extend) restarts the lease only if the holding named by `token` is still
///   `owner`'s, in one step.
/// * [`release`](Backend::release) frees the lock only if `owner` holds it (with `token`, when
///   given), in one step. A newer holding of the same owner is never touched by an older token.
/// * Lease expiry is judged by one clock for all clients (the store's), never by the caller's.
/// * Fencing tokens of one name strictly increase over the store's life; where a store can lose
///   them (a restart without persistence) its `docs.md` says so.
/// * Errors carry the backend's name and never a password.
#[async_trait]
pub trait Backend: Send + Sync + fmt::Debug + 'static {
    /// The backend's short name (`"sqlite"`, `"redis"`, …), for errors and reports.
    fn name(&self) -> &'static str;

    /// What this backend can do.
    fn capabilities(&self) -> Capabilities;

    /// Whether this backend implements `kind`. The default is the exclusive lock only.
    fn supports(&self, kind: LockKind) -> bool {
        kind == LockKind::Mutex
    }

    /// Takes the lock, confirms the owner's own holding, or reports it held. See the contract.
    async fn try_take(&self, req: &LockRequest) -> Result<Attempt>;

    /// Restarts the lease if `req.owner` still holds the lock with the holding `token` names;
    /// `Ok(false)` if it does not (the lease ended, someone else took it, or the same owner took
    /// it again as a new holding).
    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<bool>;

    /// Frees the lock if `req.owner` holds it: only the holding `token` names when it is
    /// `Some` (every guard release), whatever holding the owner has when it is `None` (the
    /// owner-token release of [`crate::Lock::release`]). `Ok(true)` if it was freed, `Ok(false)`
    /// if that holding was not there (nothing is changed then).
    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool>;

    /// Starts listening for "the lock may be free" and returns the notices. Called before the
    /// retry it guards, so a release between the two is not missed; the waiter keeps the stream
    /// for the rest of its wait. The default never yields (the core then relies on its timer).
    async fn watch_free(&self, _req: &LockRequest) -> Result<Wakeups> {
        Ok(Box::pin(futures_util::stream::pending()))
    }

    /// A waiter gives up (timeout or cancellation): leave any queue the store keeps for it.
    async fn abandon(&self, _req: &LockRequest) -> Result<()> {
        Ok(())
    }

    /// Free permits of the semaphore `req` names (`req.kind` is [`LockKind::Permit`]).
    async fn available_permits(&self, _req: &LockRequest) -> Result<u32> {
        Err(Error::unsupported(self.name(), "counting permits"))
    }
}
