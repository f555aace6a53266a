//! The contract a store must meet: only what has to be atomic in the store.
//!
//! Everything else (waiting with a deadline, the watchdog, re-entry, the lost signal, releasing
//! on drop, cancellation, multi-locks) is written once in the core and works the same over every
//! backend. A store supplies:
//!
//! * [`Backend::try_take`]: one attempt, answering a token and what keeps the grant alive
//!   ([`Hold`]: a lease valid for a duration the store states, or a session with an end signal);
//! * [`Backend::extend`] and [`Backend::release`], naming the exact holding by its token;
//! * optionally, [`Backend::extend_many`] with [`Backend::max_batch`]: many renewals in one
//!   call, which the watchdog then sends a round's renewals in (Redis: up to 100 per script);
//! * how a waiter waits: by default the core polls `try_take` and wakes on
//!   [`Backend::watch_free`]; a store whose waiters hold a place in a queue (a fair lock, a
//!   ZooKeeper node, an etcd key) supplies its own [`Waiter`] instead;
//! * [`Capabilities`]: whether it notifies, its lease model, whether waiters queue;
//! * optionally, the few steps leader election and the count-down latch need beyond the lock
//!   ([`Backend::elect_write`], [`Backend::latch_count_down`], …; see [`Capabilities::elections`]
//!   and [`Capabilities::latches`]), and for operations, a description of its locks and a
//!   forced release ([`Backend::status`], [`Backend::force_release`]; see
//!   [`Capabilities::inspects`]). The defaults answer [`crate::ErrorKind::Unsupported`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::Stream;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};
use crate::status::{ForcedRelease, LockStatus, Selection};
use crate::types::{FencingToken, Lease, LockKind, LockName, OwnerToken};

/// A future that resolves once: "the store ended the session that held the lock".
pub type Signal = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A semaphore as its store counts it ([`Backend::count_permits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PermitCount {
    /// The size the store keeps; `None` if the semaphore was never used.
    pub size: Option<u32>,
    /// The permits taken: live holdings, and where waiters hold places among the holders
    /// (ZooKeeper's nodes, etcd's keys), those too.
    pub taken: u32,
}

impl PermitCount {
    /// The permits free for a caller asking for a semaphore of `asked` permits, or
    /// [`permits_differ`] if the store keeps another size. 0 while more are held than a shrink
    /// left; a semaphore never used would have the caller's size.
    pub fn free(self, backend: &'static str, name: &LockName, asked: u32) -> Result<u32> {
        match self.size {
            Some(size) if size != asked => Err(permits_differ(backend, name, size, asked)),
            size => Ok(size.unwrap_or(asked).saturating_sub(self.taken)),
        }
    }
}

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
    /// attempts, so that a resize made while it waited ([`Backend::set_permits`]) lets it in or
    /// keeps it waiting rather than failing it.
    pub follows_resize: bool,
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

/// The error of a caller asking `asked` permits of the semaphore `name`, whose size the store
/// keeps as `stored` ([`ErrorKind::InvalidInput`], naming both): what a backend answers instead
/// of a permit.
pub fn permits_differ(backend: &'static str, name: &LockName, stored: u32, asked: u32) -> Error {
    let plural = if stored == 1 { "" } else { "s" };
    Error::new(
        ErrorKind::InvalidInput,
        format!(
            "semaphore {name:?} has {stored} permit{plural}, and this caller asks for {asked}: \
             a semaphore's size is kept with it from its first use, and every caller must ask \
             the same; fix the caller's count, or change the size for everyone with \
             Client::set_semaphore_permits"
        ),
    )
    .with_backend(backend)
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

/// One entry of an election's log in the store: a leader's value in its term, or the end of a
/// term (the leader resigned). Entries of one election are numbered by `seq` in the order they
/// were written, and their terms never decrease in that order.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionEntry {
    /// Position in the election's log: each entry's is larger than the one before.
    pub seq: u64,
    /// The term: the fencing token of the leader's hold of the election's lock.
    pub term: FencingToken,
    /// What the leader proclaimed; `None` once it resigned.
    pub value: Option<String>,
}

impl ElectionEntry {
    /// An entry (for backends building their answers).
    pub fn new(seq: u64, term: FencingToken, value: Option<String>) -> Self {
        ElectionEntry { seq, term, value }
    }
}

/// How many entries of an election's log a store keeps (older ones are trimmed): an observer
/// further behind than this misses the oldest of the terms it has not read.
pub const ELECTION_LOG_KEEP: u64 = 1000;

/// How a store keeps a holding alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseModel {
    /// Each lock has its own lease, renewed by the core's watchdog; `granularity` is the
    /// smallest step the store can keep (leases shorter than it are refused).
    PerLock {
        /// The store's lease resolution.
        granularity: Duration,
    },
    /// A holding lasts as long as the client's session with the store; nothing is renewed per
    /// lock. The core keeps a lease meaning what it means on every store — a holder that stops
    /// (crashed, paused, no watchdog) blocks others at most that long — by refusing
    /// ([`crate::ErrorKind::InvalidLease`]) a lease set shorter than `expires_after`, and every
    /// lease set (and [`crate::Lock::no_watchdog`]) when there is no `expires_after`.
    Session {
        /// How long after its holder's last contact the store ends a session (a ZooKeeper
        /// session timeout, an etcd lease's TTL): how long a crashed or paused holder keeps its
        /// locks. `None` for a session that is its connection, which a paused holder keeps
        /// open: nothing bounds a stopped holder by time.
        expires_after: Option<Duration>,
        /// For the error refusing a lease: what sets `expires_after` and how to change it, or,
        /// without one, why no lease can be kept and what to use instead (one clause).
        explain: &'static str,
    },
}

/// What a backend can do, so the core can refuse early and choose how to wait, and the
/// conformance suite can tell which cases apply.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Capabilities {
    /// The store tells waiters when a lock may be free ([`Backend::watch_free`] or the
    /// backend's [`Waiter::changed`] is meaningful); without it the core waits with a jittered
    /// backoff bounded by the holder's lease left.
    pub notifies: bool,
    /// How holdings are kept alive.
    pub lease: LeaseModel,
    /// Waiters hold a place in a queue in the store, which their [`Waiter::leave`] must clear.
    pub queues: bool,
    /// A release hands the lock to a waiter of the same client itself (the backend's
    /// [`Waiter`]), so the core does not also wake one of them to try again.
    pub hands_over: bool,
    /// The store keeps election records: [`Backend::elect_write`], [`Backend::elect_current`],
    /// [`Backend::elect_log`] and [`Backend::watch_election`] work.
    pub elections: bool,
    /// The store keeps count-down latches: [`Backend::latch_set`], [`Backend::latch_count_down`],
    /// [`Backend::latch_count`] and [`Backend::watch_latch`] work.
    pub latches: bool,
    /// The store can describe its locks and remove holdings by force: [`Backend::status`] and
    /// [`Backend::force_release`] work.
    pub inspects: bool,
}

impl Capabilities {
    /// A store with per-lock leases of millisecond resolution that neither notifies nor queues.
    pub fn leases() -> Self {
        Capabilities {
            notifies: false,
            lease: LeaseModel::PerLock {
                granularity: Duration::from_millis(1),
            },
            queues: false,
            hands_over: false,
            elections: false,
            latches: false,
            inspects: false,
        }
    }

    /// A store whose holdings are sessions, that neither notifies nor queues: sessions the
    /// store ends `expires_after` their holder's last contact, or (`None`) with their
    /// connection. `explain` is [`LeaseModel::Session`]'s.
    pub fn sessions(expires_after: Option<Duration>, explain: &'static str) -> Self {
        Capabilities {
            lease: LeaseModel::Session {
                expires_after,
                explain,
            },
            ..Self::leases()
        }
    }

    /// The same, with notifications.
    pub fn notifying(self) -> Self {
        Capabilities {
            notifies: true,
            ..self
        }
    }

    /// The same, with releases handing the lock to this client's waiters themselves.
    pub fn handing_over(self) -> Self {
        Capabilities {
            hands_over: true,
            ..self
        }
    }

    /// The same, with election records and count-down latches kept in the store.
    pub fn electing_and_latching(self) -> Self {
        Capabilities {
            elections: true,
            latches: true,
            ..self
        }
    }

    /// The same, with [`Backend::status`] and [`Backend::force_release`].
    pub fn inspecting(self) -> Self {
        Capabilities {
            inspects: true,
            ..self
        }
    }

    /// The same, with waiters queueing in the store.
    pub fn queueing(self) -> Self {
        Capabilities {
            queues: true,
            ..self
        }
    }

    /// The same, with lease resolution `granularity`.
    pub fn granularity(self, granularity: Duration) -> Self {
        Capabilities {
            lease: LeaseModel::PerLock { granularity },
            ..self
        }
    }

    /// Whether holdings are leases the watchdog renews.
    pub fn renews(&self) -> bool {
        matches!(self.lease, LeaseModel::PerLock { .. })
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

    /// What this backend can do.
    fn capabilities(&self) -> Capabilities;

    /// Whether this backend implements `kind`. The default is the exclusive lock only.
    fn supports(&self, kind: LockKind) -> bool {
        kind == LockKind::Mutex
    }

    /// The error for a flavour this backend lacks ([`ErrorKind::Unsupported`]): the default
    /// names the backend and the flavour; a backend whose other configuration has it says
    /// which (e.g. the URL setting to use instead).
    fn refusal(&self, kind: LockKind) -> Error {
        Error::unsupported(self.name(), kind)
    }

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

    /// The semaphore `req` names as the store counts it (`req.kind` is [`LockKind::Permit`]):
    /// the size it keeps and the permits taken. The core answers
    /// [`Lock::available_permits`](crate::Lock::available_permits) from it, by one rule for
    /// every store.
    async fn count_permits(&self, _req: &LockRequest) -> Result<PermitCount> {
        Err(Error::unsupported(self.name(), "counting permits"))
    }

    /// Sets the size the store keeps for the semaphore `name` to `permits` (at least 1),
    /// whatever it was, in one atomic step, and wakes the semaphore's waiters (a larger size may
    /// let them in). Holdings are left as they are: after a shrink, permits beyond the new size
    /// stay held until released, and new takes wait until fewer than `permits` are held.
    /// Answers the size it had (`None`: none was kept yet).
    async fn set_permits(&self, _name: &LockName, _permits: u32) -> Result<Option<u32>> {
        Err(Error::unsupported(self.name(), "resizing semaphores"))
    }

    /// Writes an election's record, fenced by its term: only if `term` is at least the largest
    /// term ever written for `election` (so a deposed leader can never overwrite a newer one).
    /// If `(term, value)` differs from the latest entry, a new entry is appended to the log
    /// (keeping the last [`ELECTION_LOG_KEEP`]) and watchers are notified; in any case the
    /// record is live for `ttl` from now by the store's clock (`value: None` ends the term: no
    /// live leader). `Ok(false)`, with nothing changed, if a larger term was written.
    async fn elect_write(
        &self,
        _election: &LockName,
        _term: FencingToken,
        _value: Option<&str>,
        _ttl: Duration,
    ) -> Result<bool> {
        Err(Error::unsupported(self.name(), "leader election"))
    }

    /// The live leader of `election`: the latest entry, if it has a value and its `ttl` has not
    /// run out by the store's clock.
    async fn elect_current(&self, _election: &LockName) -> Result<Option<ElectionEntry>> {
        Err(Error::unsupported(self.name(), "leader election"))
    }

    /// The entries after `after` (by `seq`, oldest first); with `None`, only the latest entry
    /// (where an observer starts). Expired or not.
    async fn elect_log(
        &self,
        _election: &LockName,
        _after: Option<u64>,
    ) -> Result<Vec<ElectionEntry>> {
        Err(Error::unsupported(self.name(), "leader election"))
    }

    /// Starts listening for "the election's log may have grown". The default never yields: the
    /// core then polls (bounded, jittered), as it does for a store that does not notify.
    async fn watch_election(&self, _election: &LockName) -> Result<Wakeups> {
        Ok(Box::pin(futures_util::stream::pending()))
    }

    /// Sets the latch's count to `count` (at least 1) if it is 0 or the latch does not exist;
    /// `Ok(false)`, with nothing changed, if a count is running.
    async fn latch_set(&self, _latch: &LockName, _count: u64) -> Result<bool> {
        Err(Error::unsupported(self.name(), "count-down latches"))
    }

    /// Counts the latch down by one, never below 0, and answers the count after; the step that
    /// reaches 0 notifies the latch's watchers.
    async fn latch_count_down(&self, _latch: &LockName) -> Result<u64> {
        Err(Error::unsupported(self.name(), "count-down latches"))
    }

    /// The latch's count (0 if it does not exist).
    async fn latch_count(&self, _latch: &LockName) -> Result<u64> {
        Err(Error::unsupported(self.name(), "count-down latches"))
    }

    /// Starts listening for "the latch may have reached 0". The default never yields: the core
    /// then polls.
    async fn watch_latch(&self, _latch: &LockName) -> Result<Wakeups> {
        Ok(Box::pin(futures_util::stream::pending()))
    }

    /// The locks `which` selects, as the store sees them now: each holding's token, the
    /// [`Holder`](crate::status::Holder) record and time of its take, its lease left; waiters
    /// where the store keeps them. A lock nobody holds or waits for may be left out. Expired
    /// holdings are not listed.
    async fn status(&self, _which: &Selection) -> Result<Vec<LockStatus>> {
        Err(Error::unsupported(self.name(), "lock status"))
    }

    /// Removes every holding of `name` of flavour `kind`, whoever holds it, and advances the
    /// lock's fencing counter in the same atomic step, so every later holding's token is above
    /// the removed ones: a newer holder's fenced write makes the resource refuse the old
    /// holder's, and the old holder's next renewal finds its holding gone (its `lost()`
    /// fires). Waiters keep their places. Answers what was removed.
    async fn force_release(&self, _name: &LockName, _kind: LockKind) -> Result<ForcedRelease> {
        Err(Error::unsupported(self.name(), "forced release"))
    }

    /// What the store's own configuration puts at risk, asked of the store now, one sentence
    /// each for an operator: what, on which server (never with a password), and what to change
    /// (Redis: a `maxmemory-policy` that may evict lock keys). Not an error: a store that
    /// cannot be asked answers none. The default has none.
    async fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
}
