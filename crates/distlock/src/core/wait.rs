//! How a waiter waits: one loop for every backend and every lock flavour.
//!
//! Try; if the lock is held, start listening for "may be free" (the store's notification, and
//! releases made by this same client), then try again at once — a release between the first try
//! and the subscription is not missed. After that, sleep until a notice arrives, but never longer
//! than the holder's lease has left (a lost notice costs at most one lease, never a hang) and
//! never past the caller's deadline. Stores that cannot notify are polled with a short jittered
//! backoff, still bounded by the lease left.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{Backend, LockRequest, Wakeups};
use crate::core::Engine;
use crate::core::lease::HeldLease;
use crate::core::reentrancy::Taken;
use crate::error::{Error, ErrorKind, Result};
use crate::types::LockName;

/// When a waiter gives up.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Deadline {
    /// One attempt, no waiting.
    Now,
    /// Wait until this instant.
    At(Instant),
    /// Wait as long as it takes.
    Never,
}

impl Deadline {
    /// `wait` from now; a wait past what the clock can represent is a wait without end.
    pub(crate) fn after(wait: Duration) -> Self {
        Instant::now()
            .checked_add(wait)
            .map_or(Deadline::Never, Deadline::At)
    }
}

/// Takes the lock described by `req`, waiting up to `deadline`. `Ok(None)` when the deadline
/// passed with the lock still held by someone else.
///
/// # Cancel Safety
///
/// Dropping the future while a `try_take` is in flight may leave the lock taken in the store
/// with no guard and no watchdog; the store frees it when the lease ends. A queued waiter
/// (fair locks) leaves its queue in the background.
pub(crate) async fn acquire(
    engine: &Engine,
    req: LockRequest,
    renew: bool,
    deadline: Deadline,
) -> Result<Option<Arc<HeldLease>>> {
    let backend = &engine.backend;
    if !backend.supports(req.kind) {
        return Err(Error::unsupported(backend.name(), req.kind));
    }
    let caps = backend.capabilities();
    let mut leave_queue = caps
        .queues
        .then(|| LeaveQueueOnDrop::new(engine, req.clone()));
    let mut backoff = Backoff::default();
    let mut store_wakeups: Option<Wakeups> = None;
    let local = engine.local.subscribe(&req.name);
    loop {
        let local_release = local.notified();
        tokio::pin!(local_release);
        local_release.as_mut().enable();

        let retry_after = match engine.leases.try_take(backend, &req, renew).await? {
            Taken::Got(lease) => {
                if let Some(q) = leave_queue.as_mut() {
                    q.disarm();
                }
                return Ok(Some(lease));
            }
            Taken::Held(retry_after) => retry_after,
        };

        let now = Instant::now();
        let until = match deadline {
            Deadline::Now => return Ok(None),
            Deadline::At(at) if now >= at => return Ok(None),
            Deadline::At(at) => Some(at),
            Deadline::Never => None,
        };
        if caps.notifies && store_wakeups.is_none() {
            store_wakeups = Some(backend.watch_free(&req).await?);
            continue;
        }
        let lease_left = retry_after.unwrap_or(req.lease.duration());
        let mut nap = if caps.notifies {
            lease_left
        } else {
            backoff.next().min(lease_left.max(Duration::from_millis(1)))
        };
        if let Some(at) = until {
            nap = nap.min(at - now);
        }
        let store_notice = async {
            match store_wakeups.as_mut() {
                Some(w) => {
                    if w.next().await.is_none() {
                        // The store's notice stream ended: fall back to the timer.
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = store_notice => {}
            () = &mut local_release => {}
            () = tokio::time::sleep(nap) => {}
        }
    }
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

/// Tells a queueing store that a waiter gave up, also when the waiting future is dropped.
struct LeaveQueueOnDrop {
    job: Option<(Arc<dyn Backend>, LockRequest)>,
    runtime: Option<tokio::runtime::Handle>,
}

impl LeaveQueueOnDrop {
    fn new(engine: &Engine, req: LockRequest) -> Self {
        LeaveQueueOnDrop {
            job: Some((engine.backend.clone(), req)),
            runtime: engine.runtime.clone(),
        }
    }

    fn disarm(&mut self) {
        self.job = None;
    }
}

impl Drop for LeaveQueueOnDrop {
    fn drop(&mut self) {
        if let Some((backend, req)) = self.job.take() {
            super::spawn_detached(self.runtime.as_ref(), async move {
                if let Err(e) = backend.abandon(&req).await {
                    tracing::debug!(lock = %req.name, "leaving the wait queue failed: {e}");
                }
            });
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
