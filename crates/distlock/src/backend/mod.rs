//! The contract a store must meet: only what has to be atomic in the store.
//!
//! Everything else (waiting with a deadline, the watchdog, re-entry, the lost signal, releasing
//! on drop, cancellation, multi-locks) is written once in the core and works the same over every
//! backend. Every store implements [`Backend`], the lock itself:
//!
//! * [`Backend::try_take`]: one attempt, answering a token and what keeps the grant alive
//!   ([`Hold`]: a lease valid for a duration the store states, or a session with an end signal);
//! * [`Backend::extend`] and [`Backend::release`], naming the exact holding by its token;
//! * optionally, [`Backend::extend_many`] with [`Backend::max_batch`]: many renewals in one
//!   call, which the watchdog then sends a round's renewals in (Redis: up to 100 per script);
//! * how a waiter waits: by default the core polls `try_take` and wakes on
//!   [`Backend::watch_free`]; a store whose waiters hold a place in a queue (a fair lock, a
//!   ZooKeeper node, an etcd key) supplies its own [`Waiter`] instead;
//! * [`Capabilities`] (`capabilities.rs`): its lease model, whether it notifies, whether
//!   waiters queue, and which flavours it keeps ([`Kinds`]; the core refuses the others).
//!
//! What a store may offer beyond the lock is a trait of its own, each in its file, reached by
//! an accessor of [`Backend`] that answers `None` (the default) where the store lacks it; the
//! client then answers [`crate::ErrorKind::Unsupported`], saying what the store lacks:
//!
//! * [`Semaphores`] (`semaphores.rs`): reading and changing a semaphore's size;
//! * [`Elections`] (`elections.rs`): the fenced record and log leader election needs;
//! * [`Latches`] (`latches.rs`): a count-down latch's count;
//! * [`Inspection`] (`inspection.rs`): a description of the locks and a forced release, for
//!   operations.

mod capabilities;
mod elections;
mod inspection;
mod latches;
mod semaphores;

pub use self::capabilities::{Capabilities, Kinds, LeaseModel, ShortLeases};
pub use self::elections::{ELECTION_LOG_KEEP, ElectionEntry, ElectionWrite, Elections};
pub use self::inspection::Inspection;
pub use self::latches::Latches;
pub use self::semaphores::{PermitCount, Semaphores, permits_differ};

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::Stream;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::Result;
use crate::types::{FencingToken, Lease, LockKind, LockName, OwnerToken};

/// A future that resolves once: "the store ended the session that held the lock".
pub type Signal = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A stream with one item per "the lock may be free now" notice from the store. Dropping it
/// stops listening.
pub type Wakeups = Pin<Box<dyn Stream<Item = ()> + Send + 'static>>;

/// What one call to the store is about: which lock, which flavour, who asks, for how long.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LockRequest {
    /// The lock's name.
    pub name: LockName,
    /// Which synchronizer the name belongs to.
    pub kind: LockKind,
    /// Who asks (the secret that proves ownership).
    pub owner: OwnerToken,
    /// How long the store should keep the lock without renewal.
    pub lease: Lease,
    /// For a semaphore: whether a take goes by whatever size the store keeps for it. `false`
    /// (the default) for an acquisition's first attempt, which the store refuses, as
    /// [`permits_differ`], when the size it keeps is not `permits`; `true` for a waiter's later
    /// attempts, so that a resize made while it waited ([`Semaphores::set_permits`]) lets it in or
    /// keeps it waiting rather than failing it.
    pub follows_resize: bool,
}

/// The error of an owner that holds the read side of `name` and asks for its write side
/// ([`crate::ErrorKind::InvalidInput`]): refused, as two readers upgrading at once would each
/// wait for the other to leave.
pub fn upgrade_refused(backend: &'static str, name: &LockName) -> crate::Error {
    crate::Error::new(
        crate::ErrorKind::InvalidInput,
        format!(
            "lock {name:?}: this owner holds the read lock; release it before taking the write \
             lock (upgrading could deadlock two readers)"
        ),
    )
    .with_backend(backend)
}

impl LockRequest {
    /// A request for `name` of flavour `kind` by `owner`, with `lease`.
    pub fn new(name: LockName, kind: LockKind, owner: OwnerToken, lease: Lease) -> Self {
        LockRequest {
            name,
            kind,
            owner,
            lease,
            follows_resize: false,
        }
    }
}

/// What keeps a grant alive.
#[non_exhaustive]
pub enum Hold {
    /// A lease the store keeps for `valid_for`, counted from when the request was *sent*. Usually
    /// the requested lease; less where the store can promise less (Redlock: lease − drift), more
    /// where it rounds up (whole seconds). The core counts the time the answer took (it counts
    /// from the send), so a backend must not take it off again. The core renews every third of
    /// it.
    Lease {
        /// How long the grant is valid from the send time of the request.
        valid_for: Duration,
    },
    /// A session: the holding lasts as long as the store's session, with no renewal; the signal
    /// resolves when the store ends the session (a killed connection, an expired ZooKeeper
    /// session).
    Session {
        /// Resolves when the session that holds the lock has ended.
        ended: Signal,
        /// For a session that ends by time (an etcd lease, a ZooKeeper session timeout): the
        /// instant until which the store has confirmed it, counted from the send time of the
        /// last confirmation, as the store's keep-alive moves it on. The holding is then lost by
        /// the clock the moment it passes, as a lease is (a process resuming from a pause knows
        /// before any round trip). `None` for a session that is its connection.
        valid_until: Option<watch::Receiver<Instant>>,
    },
}

/// The answer to one attempt ([`Backend::try_take`], [`Waiter::poll`]).
#[non_exhaustive]
pub enum Attempt {
    /// The caller holds the lock now (newly taken, or its own holding confirmed: same token).
    Acquired {
        /// The fencing token of this holding; it names the holding in extend and release.
        token: FencingToken,
        /// What keeps it alive.
        hold: Hold,
    },
    /// Someone else holds it.
    Held {
        /// How long the current holder's lease has left, if the store knows: the longest a waiter
        /// should sleep before trying again, so a lost notification costs at most one lease.
        retry_after: Option<Duration>,
    },
}

impl Attempt {
    /// Taken with a lease of the requested length (the common case for lease-based stores).
    pub fn leased(token: FencingToken, req: &LockRequest) -> Self {
        Attempt::Acquired {
            token,
            hold: Hold::Lease {
                valid_for: req.lease.duration(),
            },
        }
    }
}

impl fmt::Debug for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attempt::Acquired {
                token,
                hold: Hold::Lease { valid_for },
            } => write!(f, "Acquired({token}, valid for {valid_for:?})"),
            Attempt::Acquired { token, .. } => write!(f, "Acquired({token}, session)"),
            Attempt::Held { retry_after } => write!(f, "Held({retry_after:?})"),
        }
    }
}

/// How one acquisition waits, for stores where waiting is more than "try, then wait for a
/// notice": the waiter first takes a place (a queue entry, a sequential node, a key), then asks
/// whether its turn came each time something changed, and removes its place when it gives up.
///
/// The core calls [`poll`](Waiter::poll) until it answers [`Attempt::Acquired`], waiting in
/// between on [`changed`](Waiter::changed) — never longer than the holder's lease left or the
/// caller's deadline, so a lost notice costs time, never a hang. After a timeout, and in the
/// background after the acquisition was cancelled, it calls [`leave`](Waiter::leave).
#[async_trait]
pub trait Waiter: Send + 'static {
    /// One attempt: takes the lock if it is this waiter's turn (or free), otherwise reports it
    /// held. The first call may create the waiter's place in the store.
    async fn poll(&mut self) -> Result<Attempt>;

    /// Resolves when it is worth polling again (the predecessor left, a release notice). May
    /// resolve at once, e.g. right after starting to listen, so a change between the last poll
    /// and the subscription is not missed.
    async fn changed(&mut self) -> Result<()>;

    /// The waiter gives up: removes its place in the store. Not called after `poll` answered
    /// `Acquired`.
    async fn leave(&mut self) -> Result<()>;
    /// Whether [`changed`](Waiter::changed) resolves on every change that may let this waiter
    /// in although the store does not notify (the backend watches for it), so the core sleeps
    /// until a change or the lease left instead of polling on its own timer. Stores that notify
    /// say so in [`Capabilities::notifies`].
    fn watched(&self) -> bool {
        false
    }
}

/// [`Waiter::changed`] for waiters woken by a stream of notices: the first call starts listening
/// (`subscribe`) and answers at once, so the waiter polls again and a change between its last
/// poll and the subscription is not missed; later calls wait for the next notice — forever once
/// the stream has ended (the core's timer takes over). Cancel-safe: dropped mid-subscription, it
/// subscribes again next time.
/// `subscribe` is only called when there is no stream yet: a waiter woken many times builds no
/// subscription future it would throw away.
pub async fn next_notice<S, F>(wakeups: &mut Option<Wakeups>, subscribe: S) -> Result<()>
where
    S: FnOnce() -> F,
    F: Future<Output = Result<Wakeups>>,
{
    use futures_util::StreamExt;
    match wakeups {
        None => {
            *wakeups = Some(subscribe().await?);
            Ok(())
        }
        Some(stream) => {
            if stream.next().await.is_none() {
                std::future::pending::<()>().await;
            }
            Ok(())
        }
    }
}

/// The lock's atomic steps a store supplies, and the accessors of what it offers beyond the
/// lock (each `None` unless the store implements it).
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
///   `owner`'s, in one step, and says for how long it is valid now.
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

    /// What this backend's lock is like: lease model, notices, queues, the flavours it keeps.
    fn capabilities(&self) -> Capabilities;

    /// Takes the lock, confirms the owner's own holding, or reports it held. See the contract.
    async fn try_take(&self, req: &LockRequest) -> Result<Attempt>;

    /// Restarts the lease if `req.owner` still holds the lock with the holding `token` names:
    /// `Some(valid_for)`, counted from when the request was sent. `None` if it does not (the
    /// lease ended, someone else took it, or the same owner took it again as a new holding).
    /// For session holdings this only confirms the holding; the duration is not used.
    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<Option<Duration>>;

    /// How many renewals [`extend_many`](Backend::extend_many) takes in one call: the watchdog
    /// renews the holdings due in one round in batches of at most this many. 1, the default,
    /// renews each holding by its own [`extend`](Backend::extend).
    fn max_batch(&self) -> usize {
        1
    }

    /// [`extend`](Backend::extend) for each holding of `batch` (at most
    /// [`max_batch`](Backend::max_batch) of them, of any flavour), answered in the same order,
    /// each exactly as its own `extend` would answer: a store that renews many holdings in one
    /// step checks each by its own owner and token. The default runs the `extend`s side by side.
    async fn extend_many(
        &self,
        batch: &[(LockRequest, FencingToken)],
    ) -> Vec<Result<Option<Duration>>> {
        futures_util::future::join_all(batch.iter().map(|(req, token)| self.extend(req, *token)))
            .await
    }

    /// Frees the lock if `req.owner` holds it: only the holding `token` names when it is
    /// `Some` (every guard release), whatever holding the owner has when it is `None` (the
    /// owner-token release of [`crate::Lock::release`]). `Ok(true)` if it was freed, `Ok(false)`
    /// if that holding was not there (nothing is changed then).
    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool>;

    /// This store's own way of waiting for `req`, if it has one (see [`Waiter`]). `None`, the
    /// default, lets the core poll [`try_take`](Backend::try_take) and wake on
    /// [`watch_free`](Backend::watch_free).
    fn waiter(&self, _req: &LockRequest) -> Option<Box<dyn Waiter>> {
        None
    }

    /// Starts listening for "the lock may be free" and returns the notices. Called before the
    /// retry it guards, so a release between the two is not missed; the waiter keeps the stream
    /// for the rest of its wait. The default never yields (the core then relies on its timer).
    async fn watch_free(&self, _req: &LockRequest) -> Result<Wakeups> {
        Ok(Box::pin(futures_util::stream::pending()))
    }

    /// A waiter of the default kind gives up (timeout or cancellation): leave any queue the
    /// store keeps for it.
    async fn abandon(&self, _req: &LockRequest) -> Result<()> {
        Ok(())
    }

    /// The store's semaphore sizing, if it keeps semaphores (see [`Semaphores`]): `Some` where
    /// [`Capabilities::kinds`] has [`LockKind::Permit`]. `None`, the default, otherwise.
    fn semaphores(&self) -> Option<&dyn Semaphores> {
        None
    }

    /// The store's election records, if it keeps them (see [`Elections`]). `None`, the
    /// default: elections answer [`crate::ErrorKind::Unsupported`].
    fn elections(&self) -> Option<&dyn Elections> {
        None
    }

    /// The store's count-down latches, if it keeps them (see [`Latches`]). `None`, the
    /// default: latches answer [`crate::ErrorKind::Unsupported`].
    fn latches(&self) -> Option<&dyn Latches> {
        None
    }

    /// The store's description of its locks and forced release, if it has them (see
    /// [`Inspection`]). `None`, the default: both answer [`crate::ErrorKind::Unsupported`].
    fn inspection(&self) -> Option<&dyn Inspection> {
        None
    }
}

/// The accessors of [`Backend`] for the traits a store implements on itself, written inside its
/// `impl Backend`: `offers!(elections, latches)` answers `Some(self)` from `elections()` and
/// `latches()`. Each name is one of `semaphores`, `elections`, `latches`, `inspection`; an
/// accessor whose answer depends on the store's mode is written out instead.
// A build with no store (the `serde` feature alone) has no `impl Backend` to write them in.
#[allow(unused_macros)]
macro_rules! offers {
    ($($what:ident),+ $(,)?) => {
        $( $crate::backend::offers!(@one $what); )+
    };
    (@one semaphores) => {
        fn semaphores(&self) -> Option<&dyn $crate::backend::Semaphores> {
            Some(self)
        }
    };
    (@one elections) => {
        fn elections(&self) -> Option<&dyn $crate::backend::Elections> {
            Some(self)
        }
    };
    (@one latches) => {
        fn latches(&self) -> Option<&dyn $crate::backend::Latches> {
            Some(self)
        }
    };
    (@one inspection) => {
        fn inspection(&self) -> Option<&dyn $crate::backend::Inspection> {
            Some(self)
        }
    };
}
#[allow(unused_imports)]
pub(crate) use offers;
