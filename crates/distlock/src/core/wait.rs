//! How a waiter waits: one loop for every backend and every lock flavour.
//!
//! Each attempt asks the waiter ([`Waiter::poll`]: the store's own, or [`PollingWaiter`] built
//! from `try_take` + `watch_free`). If the lock is held, the loop waits for the waiter's
//! [`changed`](Waiter::changed) (which, for the polling waiter, first subscribes and answers at
//! once, so a release between the try and the subscription is not missed) or for a release
//! made by this same client — but never longer than the holder's lease has left (a lost notice
//! costs at most one lease, never a hang) and never past the caller's deadline. Stores that
//! cannot notify are polled with a short jittered backoff, still bounded by the lease left.
//!
//! # Cancellation
//!
//! Each attempt is a future that owns what it needs. A caller that drops the acquisition
//! mid-request cannot cut the store's answer off: the unfinished attempt moves to a background
//! task that finishes it and, if it took the lock, releases that exact holding (by its token);
//! a waiter that gave up leaves its place in the store. Both are tracked by the engine, so
//! [`Engine::flush`] waits for them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use std::future::Future;
use std::pin::Pin;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{Attempt, Backend, Capabilities, LockRequest, Waiter, Wakeups, next_notice};
use crate::core::Engine;
pub(crate) use crate::core::deadline::Deadline;
use crate::core::lease::{self, HeldLease, Terms};
use crate::core::reentrancy::Taken;
use crate::error::{Error, ErrorKind, Result};
use crate::types::LockName;

/// What the store decides before any attempt, known in this client: whether it keeps `req`'s
/// flavour ([`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported)) and the lease it takes
/// for it ([`lease::settle`]: [`ErrorKind::InvalidLease`](crate::ErrorKind::InvalidLease)).
/// The one check behind every acquisition and [`crate::Lock::check`]. Answers the store's
/// capabilities.
pub(crate) fn admit(
    backend: &dyn Backend,
    req: &mut LockRequest,
    terms: Terms,
) -> Result<Capabilities> {
    let caps = backend.capabilities();
    caps.admit(backend.name(), req.kind)?;
    lease::settle(&caps, backend.name(), req, terms)?;
    Ok(caps)
}

/// Takes the lock described by `req`, waiting up to `deadline`. `Ok(None)` when the deadline
/// passed with the lock still held by someone else; [`unanswered`] when it passed before the
/// store answered at all.
///
/// # Cancel Safety
///
/// Dropping the future leaves nothing behind once the background clean-up has run: a take in
/// flight that succeeded is released, a waiter's place in the store is removed.
pub(crate) async fn acquire(
    engine: &Arc<Engine>,
    mut req: LockRequest,
    terms: Terms,
    deadline: Deadline,
) -> Result<Option<Arc<HeldLease>>> {
    let backend = &engine.backend;
    let caps = admit(&**backend, &mut req, terms)?;
    let waiter: Box<dyn Waiter> = backend.waiter(&req).unwrap_or_else(|| {
        Box::new(PollingWaiter {
            backend: backend.clone(),
            req: req.clone(),
            notifies: caps.notifies,
            queues: caps.queues,
            wakeups: None,
        })
    });
    // Whether a change wakes the waiter: if not, it polls on a short backoff.
    let woken = caps.notifies || waiter.watched();
    let mut waiting = Waiting {
        engine: engine.clone(),
        req: req.clone(),
        terms,
        waiter: Some(waiter),
        in_flight: None,
        acquired: false,
    };
    let mut backoff = Backoff::default();
    // Whether an attempt found the lock held (the caller is waiting now), and since when the
    // attempts have been failing.
    let mut waited = false;
    let mut failing_since: Option<Instant> = None;
    let started = Instant::now();
    // A backend that hands the lock over to this client's waiters itself needs no second
    // wake-up: it would only send a take that finds the lock handed to another.
    let local = (!caps.hands_over).then(|| engine.local.subscribe(&req.name));
    loop {
        let local_release = local.as_ref().map(|local| local.notified());
        tokio::pin!(local_release);
        if let Some(notified) = local_release.as_mut().as_pin_mut() {
            notified.enable();
        }

        let attempt = waiting.attempt();
        let answer = match deadline {
            // The deadline bounds a slow attempt too (a store riding out an election or a dead
            // server); the attempt is then finished, and undone, in the background (`Drop`).
            Deadline::At(at) if at > Instant::now() => {
                match tokio::time::timeout_at(at, attempt).await {
                    Ok(taken) => taken,
                    // Nothing is known of who holds the lock: not "held by another".
                    Err(_) if !waited => {
                        // Whole milliseconds: the message shows "1s", not "1.000966087s".
                        let waited = Duration::from_millis(started.elapsed().as_millis() as u64);
                        return Err(unanswered(&req.name, backend.name(), waited));
                    }
                    Err(_) => return Ok(None),
                }
            }
            _ => attempt.await,
        };
        let taken = match answer {
            Ok(taken) => {
                failing_since = None;
                taken
            }
            // A waiter that has found the lock held rides out a store that fails for a moment
            // (a database restarting, a connection reset): its caller asked to wait, and the
            // next attempt is as good as the first. Only where a waiter holds no place in the
            // store (nothing to lose between attempts), within its deadline, and for at most
            // RIDE_OUT of failures in a row; then the store's error is the answer.
            Err(e)
                if e.is_retryable()
                    && waited
                    && !caps.queues
                    && !matches!(deadline, Deadline::Now)
                    && failing_since.is_none_or(|since: Instant| since.elapsed() < RIDE_OUT) =>
            {
                failing_since.get_or_insert_with(Instant::now);
                tracing::debug!(lock = %req.name, "a waiter's attempt failed, trying again: {e}");
                let mut nap = backoff.next().max(Duration::from_millis(50));
                if let Some(left) = deadline.left() {
                    if left.is_zero() {
                        return Err(e);
                    }
                    nap = nap.min(left);
                }
                tokio::time::sleep(nap).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        waited = true;
        let retry_after = match taken {
            Taken::Got(lease) => return Ok(Some(lease)),
            Taken::Held(retry_after) => retry_after,
        };

        if deadline.passed() {
            waiting.leave().await;
            return Ok(None);
        }
        let lease_left = retry_after.unwrap_or(req.lease.duration());
        let mut nap = if woken {
            lease_left
        } else {
            backoff.next().min(lease_left.max(Duration::from_millis(1)))
        };
        if let Some(left) = deadline.left() {
            nap = nap.min(left);
        }
        tokio::select! {
            changed = waiting.changed() => changed?,
            () = async {
                match local_release.as_mut().as_pin_mut() {
                    Some(notified) => notified.await,
                    None => std::future::pending().await,
                }
            } => {}
            () = tokio::time::sleep(nap) => {}
        }
    }
}

/// One attempt, owning everything it needs so that it can be finished elsewhere: it hands back
/// the waiter (for the next attempt, or for leaving) and the answer.
type InFlight = Pin<Box<dyn Future<Output = (Box<dyn Waiter>, Result<Taken>)> + Send>>;

/// One acquisition's waiter, between attempts and across cancellation.
struct Waiting {
    engine: Arc<Engine>,
    req: LockRequest,
    terms: Terms,
    /// `None` while an attempt has it.
    waiter: Option<Box<dyn Waiter>>,
    /// The attempt in flight, whose answer must not be lost if the acquisition is dropped.
    in_flight: Option<InFlight>,
    acquired: bool,
}

impl Waiting {
    async fn attempt(&mut self) -> Result<Taken> {
        let Some(mut waiter) = self.waiter.take() else {
            return Err(Error::new(
                ErrorKind::Backend,
                "an earlier attempt of this acquisition failed",
            ));
        };
        let engine = self.engine.clone();
        let (req, terms) = (self.req.clone(), self.terms);
        // Polled here, in the caller's task; only a dropped acquisition hands it to a task of
        // its own (see `Drop`), so the common path spawns nothing.
        let attempt = self.in_flight.insert(Box::pin(async move {
            let taken = engine
                .leases
                .take(&engine.backend, &engine.renewals, &req, terms, &mut *waiter)
                .await;
            (waiter, taken)
        }));
        let (waiter, taken) = attempt.await;
        self.in_flight = None;
        self.waiter = Some(waiter);
        self.acquired = matches!(taken, Ok(Taken::Got(_)));
        taken
    }

    /// Cancel-safe: the waiter stays in place if the future is dropped.
    async fn changed(&mut self) -> Result<()> {
        match self.waiter.as_mut() {
            Some(w) => w.changed().await,
            None => std::future::pending().await,
        }
    }

    /// Gives up: the waiter leaves its place in the store now.
    async fn leave(&mut self) {
        if let Some(mut waiter) = self.waiter.take() {
            leave(&self.req, &mut *waiter).await;
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(attempt) = self.in_flight.take() {
            // Dropped mid-attempt: finish it in the background, then undo whatever it did.
            let engine = self.engine.clone();
            let req = self.req.clone();
            self.engine.spawn_detached(async move {
                let (mut waiter, taken) = attempt.await;
                match taken {
                    Ok(Taken::Got(lease)) => {
                        if let Err(e) = engine.release(&lease).await {
                            tracing::warn!(lock = %req.name, "releasing a cancelled acquisition failed: {e}");
                        }
                    }
                    _ => leave(&req, &mut *waiter).await,
                }
            });
        } else if !self.acquired
            && let Some(mut waiter) = self.waiter.take()
        {
            let req = self.req.clone();
            self.engine.spawn_detached(async move {
                leave(&req, &mut *waiter).await;
            });
        }
    }
}

async fn leave(req: &LockRequest, waiter: &mut dyn Waiter) {
    if let Err(e) = waiter.leave().await {
        tracing::debug!(lock = %req.name, "leaving the wait queue failed: {e}");
    }
}

/// The waiter of stores without their own: polls `try_take`, wakes on `watch_free`, and leaves
/// with `abandon` where waiters queue.
struct PollingWaiter {
    backend: Arc<dyn Backend>,
    req: LockRequest,
    notifies: bool,
    queues: bool,
    wakeups: Option<Wakeups>,
}

#[async_trait]
impl Waiter for PollingWaiter {
    async fn poll(&mut self) -> Result<Attempt> {
        let attempt = self.backend.try_take(&self.req).await?;
        // The first answer that found the lock held checked a semaphore's size: from now on
        // this waiter goes by the size the store keeps, so a resize while it waits lets it in
        // (or keeps it waiting), never fails it.
        self.req.follows_resize = true;
        Ok(attempt)
    }

    async fn changed(&mut self) -> Result<()> {
        if !self.notifies {
            return std::future::pending().await;
        }
        let (backend, req) = (&self.backend, &self.req);
        next_notice(&mut self.wakeups, || backend.watch_free(req)).await
    }

    async fn leave(&mut self) -> Result<()> {
        if self.queues {
            self.backend.abandon(&self.req).await?;
        }
        Ok(())
    }
}

/// The longest a waiter goes on trying through store errors in a row (see `acquire`).
const RIDE_OUT: Duration = Duration::from_secs(30);

/// The wait reached its deadline before the store answered any attempt (a server down that the
/// client keeps trying to reach, a store stuck): a timeout, whose source, an
/// [`ErrorKind::Connection`] error, tells it from a lock held by another all along.
pub(crate) fn unanswered(name: &LockName, backend: &'static str, waited: Duration) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "lock {name:?}: no answer from the store in {}, so nothing is known of who holds it",
            crate::types::show_duration(waited)
        ),
    )
    .with_backend(backend)
    .with_source(
        Error::new(ErrorKind::Connection, "the store did not answer").with_backend(backend),
    )
}

/// Maps a wait that reached its deadline to the timeout error.
pub(crate) fn timed_out(name: &LockName, waited: Duration) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "lock {name:?} still held by another owner after {}",
            crate::types::show_duration(waited)
        ),
    )
}

/// Jittered exponential backoff for stores that cannot notify: 1 ms doubling to 32 ms, each
/// nap a random point in the upper half of the step, so waiters do not retry in lockstep.
#[derive(Default)]
struct Backoff {
    step: u32,
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let ceiling_us = 1_000u64 << self.step.min(5);
        self.step = self.step.saturating_add(1);
        let jitter = getrandom::u64().unwrap_or(0) % (ceiling_us / 2 + 1);
        Duration::from_micros(ceiling_us / 2 + jitter)
    }
}

/// Wakes this client's own waiters when one of its guards releases, so in-process hand-offs do
/// not wait for the store's notice or the backoff timer. One waiter per release (no herd).
#[derive(Default)]
pub(crate) struct LocalWakeups {
    by_name: Mutex<HashMap<LockName, Weak<Notify>>>,
}

impl LocalWakeups {
    pub(crate) fn subscribe(&self, name: &LockName) -> Arc<Notify> {
        let mut by_name = self.by_name.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = by_name.get(name).and_then(Weak::upgrade) {
            return n;
        }
        if by_name.len() > 1024 {
            by_name.retain(|_, w| w.strong_count() > 0);
        }
        let n = Arc::new(Notify::new());
        by_name.insert(name.clone(), Arc::downgrade(&n));
        n
    }

    pub(crate) fn released(&self, name: &LockName) {
        let by_name = self.by_name.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = by_name.get(name).and_then(Weak::upgrade) {
            n.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_caps() {
        let mut b = Backoff::default();
        let naps: Vec<Duration> = (0..10).map(|_| b.next()).collect();
        assert!(naps[0] >= Duration::from_micros(500) && naps[0] <= Duration::from_millis(1));
        for nap in &naps[5..] {
            assert!(*nap >= Duration::from_millis(16) && *nap <= Duration::from_millis(32));
        }
    }
}
