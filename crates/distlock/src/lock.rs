//! [`Lock`]: a handle to one named lock of one flavour, and [`MultiLock`].

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::LockRequest;
use crate::client::Client;
use crate::core::lease::Terms;
use crate::core::wait::{self, Deadline};
use crate::error::{Error, ErrorKind, Result};
use crate::guard::Guard;
use crate::metrics::Labels;
use crate::types::{FencingToken, Lease, LockKind, LockName, OwnerToken};

/// A named lock, not yet taken. Configure it (lease, renewal, owner), then acquire.
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> distlock::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let client = distlock::connect(&format!("sqlite:{}", dir.path().join("locks.db").display())).await?;
/// use std::time::Duration;
///
/// let lock = client.lock("stock:sku-42").lease(Duration::from_secs(10));
/// match lock.try_acquire().await? {
///     Some(guard) => { /* ours */ guard.release().await?; }
///     None => { /* someone else holds it */ }
/// }
/// let guard = lock.acquire_timeout(Duration::from_secs(2)).await?; // ErrorKind::Timeout
/// # Ok(()) }
/// ```
///
/// Each acquisition acts as a new owner unless [`owner`](Lock::owner) fixes one: two tasks
/// sharing a `Lock` value still exclude each other. Re-entry is explicit: acquire again with the
/// same owner token, or call [`Guard::reenter`].
#[derive(Clone, Debug)]
pub struct Lock {
    client: Client,
    name: String,
    kind: LockKind,
    lease: Duration,
    /// Whether [`lease`](Lock::lease) set it (else it is a default, which is never refused).
    lease_set: bool,
    renew: bool,
    max_hold: Option<Duration>,
    owner: Option<OwnerToken>,
}

impl Lock {
    pub(crate) fn new(client: Client, name: &str, kind: LockKind) -> Self {
        Lock {
            client,
            name: name.to_string(),
            kind,
            lease: Lease::DEFAULT.duration(),
            lease_set: false,
            renew: true,
            max_hold: None,
            owner: None,
        }
    }

    /// The lease: the longest the lock outlives a holder that stops renewing (crashed, paused,
    /// or [`no_watchdog`](Lock::no_watchdog)), plus the store's granularity. 10 ms ..= 24 h;
    /// 30 s by default. Checked at acquisition ([`ErrorKind::InvalidLease`]).
    ///
    /// On a store whose holdings are sessions, a stopped holder keeps its locks until its
    /// session ends, so a lease is only taken where the session ends by then: shorter than a
    /// ZooKeeper session timeout or an etcd session TTL it is refused, naming the bound and the
    /// URL parameter that sets it; with SQL session locks (`?lock=session`), held as long as
    /// their connection, every lease is refused. The default lease is never refused: there it
    /// is the session's bound when that is longer than 30 s.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self.lease_set = true;
        self
    }

    /// A default lease other than 30 s (an election's): taken as the default is, raised to a
    /// session's bound rather than refused.
    pub(crate) fn default_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Turns the watchdog off: the lock is held for one lease at most, and the guard's
    /// [`lost`](Guard::lost) fires when it ends. On a session store this client frees the
    /// holding in the store when the lease ends (a holder crashed or paused then is freed by
    /// its session's end, at most the session's expiry later); SQL session locks refuse it
    /// ([`ErrorKind::InvalidLease`]): nothing could end a paused holder's holding by time.
    pub fn no_watchdog(mut self) -> Self {
        self.renew = false;
        self
    }

    /// Caps how long a live holder keeps the lock: the watchdog stops renewing once `max_hold`
    /// has passed since the take, the guard's [`lost`](Guard::lost) fires when the last lease
    /// the store confirmed ends (its error says the cap ended it), and the lock frees then. A
    /// holder stuck in its work, but alive and renewing, then blocks others at most `max_hold`
    /// plus one lease, as a crashed one blocks them one lease. [`run`](Lock::run) stops its
    /// work at the loss, as for any lost lease.
    ///
    /// On a store whose holdings are sessions (etcd, ZooKeeper) the holding is freed in the
    /// store at `max_hold` itself. Re-entry shares the first take's cap. A cap too long for the
    /// clock (`Duration::MAX`) is no cap; zero is refused at acquisition
    /// ([`ErrorKind::InvalidInput`]).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// Acquires as `owner`: in this client, acquisitions with the same token re-enter the
    /// owner's holding (one more hold of the same lease and token). Another client or process
    /// presenting the token gets the same holding back but counts no hold: sharing an owner
    /// token between clients is a hand-over, not re-entry.
    pub fn owner(mut self, owner: OwnerToken) -> Self {
        self.owner = Some(owner);
        self
    }

    /// The lock's name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Which synchronizer it is (lock, fair lock, read or write side, semaphore permit).
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    fn request(&self) -> Result<LockRequest> {
        if let LockKind::Permit { permits: 0 } = self.kind {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "a semaphore needs at least one permit",
            ));
        }
        if self.max_hold.is_some_and(|hold| hold.is_zero()) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "lock {:?}: a max_hold of zero would end every holding as it is taken",
                    self.name
                ),
            ));
        }
        Ok(LockRequest::new(
            LockName::new(&self.name)?,
            self.kind,
            self.owner.clone().unwrap_or_else(OwnerToken::random),
            Lease::new(self.lease)?,
        ))
    }

    /// Whether the store will accept this lock as it is set up, asked before the first
    /// acquisition (at startup): `Ok(())`, or the typed error that acquisition would answer
    /// for its settings — [`ErrorKind::Unsupported`] for a flavour the store lacks
    /// ([`Client::supports`]), [`ErrorKind::InvalidLease`] for a lease it cannot keep (see
    /// [`Client::keepable_lease`]) or that [`no_watchdog`](Lock::no_watchdog) cannot bound,
    /// [`ErrorKind::InvalidName`] for the name, [`ErrorKind::InvalidInput`] for a zero
    /// [`max_hold`](Lock::max_hold) or a semaphore of zero permits. Nothing is sent to the
    /// store: it answers from what the client knows of it. What only the store knows at the
    /// take is not checked: whether it can be reached, and whether a semaphore's size matches
    /// the one the store keeps ([`Client::semaphore`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> distlock::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let client = distlock::connect(&format!("sqlite:{}", dir.path().join("locks.db").display())).await?;
    /// use std::time::Duration;
    /// let lock = client.lock("nightly-report").lease(Duration::from_secs(5));
    /// lock.check()?; // at startup: a setting the store cannot serve fails here
    /// # Ok(()) }
    /// ```
    pub fn check(&self) -> Result<()> {
        let mut req = self.request()?;
        wait::admit(&*self.client.engine.backend, &mut req, self.terms()).map(drop)
    }

    fn terms(&self) -> Terms {
        Terms {
            renew: self.renew,
            lease_set: self.lease_set,
            max_hold: self.max_hold,
        }
    }

    async fn take(&self, req: LockRequest, deadline: Deadline) -> Result<Option<Guard>> {
        let engine = &self.client.engine;
        let labels = Labels::of(engine.backend.name(), &req.name);
        // The span carries the lock's name and, once granted, its fencing token; never the
        // owner token (the secret that proves ownership).
        let span = tracing::debug_span!(
            "distlock.acquire",
            backend = engine.backend.name(),
            lock = %req.name,
            kind = %req.kind.short_name(),
            token = tracing::field::Empty,
            result = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        // Found held with no wait asked: contention, which is not a timeout.
        let contended = matches!(deadline, Deadline::Now);
        let started = Instant::now();
        let waiting = labels.waiting();
        let taken = wait::acquire(engine, req, self.terms(), deadline)
            .instrument(span.clone())
            .await;
        drop(waiting);
        let result = match &taken {
            Ok(Some(lease)) => {
                span.record("token", lease.token.get());
                labels.acquired(started.elapsed());
                "acquired"
            }
            Ok(None) if contended => {
                labels.contended();
                "contended"
            }
            // A wait that ran out before the store answered counts as a timeout too.
            Ok(None) => {
                labels.timed_out();
                "timeout"
            }
            Err(e) if e.is_timeout() => {
                labels.timed_out();
                "timeout"
            }
            Err(e) => {
                labels.failed(e);
                span.record("error", e.kind().as_str());
                "error"
            }
        };
        span.record("result", result);
        Ok(taken?.map(|lease| Guard::new(engine.clone(), lease)))
    }

    /// Takes the lock, waiting up to `deadline`: `Ok(None)` if it is still held by another
    /// then (or the store answered no attempt before it: see [`wait::acquire`]). The one take
    /// behind every public one, and behind the multi-lock's and the election's waits.
    pub(crate) async fn take_until(&self, deadline: Deadline) -> Result<Option<Guard>> {
        self.take(self.request()?, deadline).await
    }

    /// Waits as long as it takes to acquire the lock.
    ///
    /// Once it has found the lock held, a waiter rides out store errors that may pass (a
    /// database restarting, a connection reset: [`Error::is_retryable`]) by trying again, for
    /// up to 30 s of failures in a row (within its deadline, for `acquire_timeout`); then the
    /// store's error is the answer. A store that fails at the first attempt answers at once.
    /// Stores whose waiters hold a place in a queue (ZooKeeper, etcd) answer the error at once.
    ///
    /// # Cancel Safety
    ///
    /// Cancel-safe: dropping the future leaves nothing behind. A take already sent to the store
    /// finishes in the background and, if it took the lock, is released at once (by its exact
    /// holding); a waiter's place in a queue is removed. [`Client::shutdown`] waits for that
    /// clean-up.
    pub async fn acquire(&self) -> Result<Guard> {
        self.take(self.request()?, Deadline::Never)
            .await?
            .ok_or_else(unreachable_timeout)
    }

    /// Acquires the lock if it is free (or already ours), never waiting. `Ok(None)` if another
    /// owner holds it.
    ///
    /// # Cancel Safety
    ///
    /// Cancel-safe, as [`acquire`](Lock::acquire).
    pub async fn try_acquire(&self) -> Result<Option<Guard>> {
        self.take(self.request()?, Deadline::Now).await
    }

    /// Waits at most `wait` for the lock; [`ErrorKind::Timeout`] after that. If the store
    /// answered no attempt in that time (a server down that the client keeps trying to reach),
    /// the timeout's [`source`](std::error::Error::source) is an [`ErrorKind::Connection`]
    /// error: who holds the lock is then unknown. A `wait` too long for the clock to represent
    /// (`Duration::MAX`) waits without end.
    ///
    /// # Cancel Safety
    ///
    /// Cancel-safe, as [`acquire`](Lock::acquire).
    pub async fn acquire_timeout(&self, wait: Duration) -> Result<Guard> {
        let req = self.request()?;
        let name = req.name.clone();
        match self.take(req, Deadline::after(wait)).await? {
            Some(guard) => Ok(guard),
            None => Err(wait::timed_out(&name, wait)),
        }
    }

    /// Waits for the lock, runs `work` while holding it, and releases it: the safe path in one
    /// call. `Ok` only if the lock was held throughout the work: if the holding is lost
    /// meanwhile (renewal failed, the store gave it away, a forced release), `work` is stopped
    /// at its next `.await` and the answer is the [`ErrorKind::LeaseLost`] error saying why; if
    /// the release finds the holding gone, the answer is that error too (the work may have
    /// overlapped another holder's). Pass [`Guard::fencing_token`] to the resource, so that it
    /// can refuse a late write ([`crate::fence`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> distlock::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = format!("sqlite:{}", dir.path().join("locks.db").display());
    /// let client = distlock::connect(&url).await?;
    /// let written = client
    ///     .lock("invoice:7")
    ///     .run(async |guard| {
    ///         // … write, passing guard.fencing_token() to the resource …
    ///         guard.fencing_token().get()
    ///     })
    ///     .await?;
    /// assert!(written > 0);
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel Safety
    ///
    /// Dropping the future stops the work and releases the lock in the background (as a
    /// dropped guard does).
    pub async fn run<T>(&self, work: impl AsyncFnOnce(&Guard) -> T) -> Result<T> {
        let guard = self.acquire().await?;
        let lost = guard.lost();
        // The work borrows the guard: it is dropped (stopped) before the guard is released.
        let outcome = {
            let work = work(&guard);
            tokio::select! {
                biased;
                lost = lost => Err(lost),
                out = work => Ok(out),
            }
        };
        let held = guard.release().await;
        let out = outcome?;
        if held? {
            return Ok(out);
        }
        Err(Error::new(
            ErrorKind::LeaseLost,
            format!(
                "lock {:?} was no longer held when the work finished: it may have overlapped \
                 another holder's",
                self.name
            ),
        )
        .with_backend(self.client.backend_name()))
    }

    /// Frees the lock if the owner set with [`owner`](Lock::owner) holds it, without a guard
    /// (the other half of [`Guard::leak`]: a hand-over to another process that knows the owner
    /// token). [`ErrorKind::NotHeld`] if that owner does not hold the lock; someone else's lock
    /// is left as it is. Guards of this owner in this client learn the loss at their next
    /// renewal.
    ///
    /// # Cancel Safety
    ///
    /// If the future is dropped before the store answers, the release may or may not have
    /// happened.
    pub async fn release(&self) -> Result<()> {
        let Some(owner) = &self.owner else {
            return Err(Error::new(
                ErrorKind::NotHeld,
                format!(
                    "lock {:?}: release without a guard needs the owner token",
                    self.name
                ),
            ));
        };
        let mut req = self.request()?;
        req.owner = owner.clone();
        let span = tracing::debug_span!(
            "distlock.release",
            backend = self.client.backend_name(),
            lock = %req.name,
            kind = %req.kind.short_name(),
        );
        if self
            .client
            .engine
            .release_by_owner(&req)
            .instrument(span)
            .await?
        {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::NotHeld,
            format!("lock {:?} is not held by this owner", self.name),
        )
        .with_backend(self.client.backend_name()))
    }

    /// Free permits of a semaphore (only for locks made by [`Client::semaphore`]): its size
    /// minus the permits held, 0 while more are held than a shrink left. A handle asking
    /// another size than the semaphore's gets [`ErrorKind::InvalidInput`], as a take does.
    pub async fn available_permits(&self) -> Result<u32> {
        let req = self.request()?;
        let LockKind::Permit { permits } = req.kind else {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "available_permits is only for semaphores",
            ));
        };
        let span = tracing::debug_span!(
            "distlock.available_permits",
            backend = self.client.backend_name(),
            lock = %req.name,
            kind = %req.kind.short_name(),
        );
        let backend = self.client.engine.backend.as_ref();
        backend.capabilities().admit(backend.name(), req.kind)?;
        let count = crate::client::semaphores(backend, "counting permits")?
            .count_permits(&req)
            .instrument(span)
            .await?;
        count.free(backend.name(), &req.name, permits)
    }
}

/// Several locks taken all together or not at all.
///
/// Names are sorted and de-duplicated, and taken in that order, so two callers asking for
/// {a, b} and {b, a} cannot deadlock. If one cannot be taken, the ones already taken are
/// released before the call returns.
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> distlock::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let client = distlock::connect(&format!("sqlite:{}", dir.path().join("locks.db").display())).await?;
/// let both = client.multi_lock(["account:7", "account:3"]).acquire().await?;
/// let tokens = both.fencing_tokens(); // in name order: account:3, account:7
/// both.release().await?;
/// # Ok(()) }
/// ```
///
/// # Cancel Safety
///
/// Every acquisition method is cancel-safe: a dropped future's guards are dropped, which
/// releases them in the background, and the lock being waited for is cleaned up as for
/// [`Lock::acquire`].
#[derive(Clone, Debug)]
pub struct MultiLock {
    client: Client,
    names: Vec<String>,
    lease: Option<Duration>,
    renew: bool,
    max_hold: Option<Duration>,
}

/// The guards of a [`MultiLock`], one per name, in name order.
#[derive(Debug)]
#[must_use = "dropping the guards releases the locks at once (in the background)"]
pub struct MultiGuard {
    guards: Vec<Guard>,
}

impl MultiLock {
    pub(crate) fn new(client: Client, mut names: Vec<String>) -> Self {
        names.sort();
        names.dedup();
        MultiLock {
            client,
            names,
            lease: None,
            renew: true,
            max_hold: None,
        }
    }

    /// The lease of every lock (see [`Lock::lease`]).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Turns the watchdog off for every lock (see [`Lock::no_watchdog`]).
    pub fn no_watchdog(mut self) -> Self {
        self.renew = false;
        self
    }

    /// Caps how long each lock is renewed after its take (see [`Lock::max_hold`]).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    fn locks(&self) -> Result<Vec<Lock>> {
        if self.names.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "a multi-lock needs at least one name",
            ));
        }
        self.names
            .iter()
            .map(|n| {
                LockName::new(n)?;
                let mut lock = self.client.lock(n);
                if let Some(lease) = self.lease {
                    lock = lock.lease(lease);
                }
                lock.renew = self.renew;
                lock.max_hold = self.max_hold;
                Ok(lock)
            })
            .collect()
    }

    /// Whether the store will accept every lock of this multi-lock as it is set up (see
    /// [`Lock::check`]): `Ok(())` or the error the first acquisition would answer. Nothing is
    /// sent to the store.
    pub fn check(&self) -> Result<()> {
        self.locks()?.iter().try_for_each(Lock::check)
    }

    /// Waits for all the locks.
    pub async fn acquire(&self) -> Result<MultiGuard> {
        self.take_all(Deadline::Never)
            .instrument(self.span())
            .await?
            .ok_or_else(unreachable_timeout)
    }

    /// Takes all the locks if every one is free now; `Ok(None)` (holding none) otherwise.
    pub async fn try_acquire(&self) -> Result<Option<MultiGuard>> {
        self.try_take_all().instrument(self.span()).await
    }

    async fn try_take_all(&self) -> Result<Option<MultiGuard>> {
        let mut guards = Vec::new();
        for lock in self.locks()? {
            match lock.try_acquire().await {
                Ok(Some(g)) => guards.push(g),
                Ok(None) => {
                    release_all(guards).await;
                    return Ok(None);
                }
                Err(e) => {
                    release_all(guards).await;
                    return Err(e);
                }
            }
        }
        Ok(Some(MultiGuard { guards }))
    }

    /// Waits at most `wait` for all the locks; [`ErrorKind::Timeout`] (holding none) after that.
    /// A `wait` too long for the clock to represent waits without end.
    pub async fn acquire_timeout(&self, wait: Duration) -> Result<MultiGuard> {
        match self
            .take_all(Deadline::after(wait))
            .instrument(self.span())
            .await?
        {
            Some(g) => Ok(g),
            None => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "locks {:?} not all free after {}",
                    self.names,
                    crate::types::show_duration(wait)
                ),
            )),
        }
    }

    /// The span of one acquisition of all the locks (each lock's own acquisition is a span
    /// inside it).
    fn span(&self) -> tracing::Span {
        tracing::debug_span!(
            "distlock.multi_acquire",
            backend = self.client.backend_name(),
            locks = ?self.names,
        )
    }

    /// Takes every lock in name order, each waited for until the one `deadline`; `Ok(None)`
    /// (holding none) if one is still held by another then.
    async fn take_all(&self, deadline: Deadline) -> Result<Option<MultiGuard>> {
        let mut guards = Vec::new();
        for lock in self.locks()? {
            let taken = match lock.take_until(deadline).await {
                // The store answered no attempt before the deadline: still not all taken.
                Err(e) if e.is_timeout() => Ok(None),
                taken => taken,
            };
            match taken {
                Ok(Some(g)) => guards.push(g),
                Ok(None) => {
                    release_all(guards).await;
                    return Ok(None);
                }
                Err(e) => {
                    release_all(guards).await;
                    return Err(e);
                }
            }
        }
        Ok(Some(MultiGuard { guards }))
    }
}

/// A wait without deadline only ends by acquiring; this error exists so no path can panic.
fn unreachable_timeout() -> Error {
    Error::new(ErrorKind::Timeout, "a wait without deadline gave up")
}

async fn release_all(guards: Vec<Guard>) {
    for g in guards.into_iter().rev() {
        let name = g.name().clone();
        if let Err(e) = g.release().await {
            tracing::warn!(lock = %name, "releasing after a failed multi-lock: {e}");
        }
    }
}

impl MultiGuard {
    /// The guards, in name order.
    pub fn guards(&self) -> &[Guard] {
        &self.guards
    }

    /// Each lock's fencing token, in name order.
    pub fn fencing_tokens(&self) -> Vec<FencingToken> {
        self.guards.iter().map(Guard::fencing_token).collect()
    }

    /// Resolves when any of the leases is lost.
    pub async fn lost(&self) -> Error {
        let all: Vec<_> = self.guards.iter().map(|g| Box::pin(g.lost())).collect();
        futures_util::future::select_all(all).await.0
    }

    /// Releases every lock; `Ok(true)` if all were still held.
    ///
    /// # Cancel Safety
    ///
    /// If the future is dropped midway, the locks not yet released are released in the
    /// background.
    pub async fn release(self) -> Result<bool> {
        let mut all_held = true;
        let mut first_err = None;
        for g in self.guards.into_iter().rev() {
            match g.release().await {
                Ok(held) => all_held &= held,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(all_held),
        }
    }
}
