//! Behaviour written once for every backend: how a waiter waits ([`wait`]), how a held lease is
//! kept and how its loss is signalled ([`lease`]), and how reentrant holders share one holding
//! ([`reentrancy`]). Backends only supply the atomic steps of [`crate::backend::Backend`]; the
//! user API (`Client`, `Lock`, `Guard`) wraps the [`Engine`] and the holdings it hands out.

pub(crate) mod changes;
pub(crate) mod lease;
pub(crate) mod reentrancy;
pub(crate) mod renewals;
pub(crate) mod wait;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

use crate::backend::{Backend, LockRequest};
use crate::error::Result;
use lease::HeldLease;
use reentrancy::LeaseTable;
use renewals::Renewals;
use wait::LocalWakeups;

/// One client's machinery: the store, the holdings it has, and the in-process wake-ups.
pub(crate) struct Engine {
    pub(crate) backend: Arc<dyn Backend>,
    leases: LeaseTable,
    /// The watchdog: renews every holding of this client that wants renewal.
    renewals: Arc<Renewals>,
    local: LocalWakeups,
    /// Where work queued outside a runtime (a guard dropped by a plain thread) runs.
    runtime: Option<tokio::runtime::Handle>,
    /// Releases and leaves still running in the background.
    background: Arc<Background>,
}

/// Counts background tasks, so that [`Engine::flush`] can wait for them.
#[derive(Default)]
struct Background {
    running: AtomicUsize,
    idle: Notify,
}

impl Engine {
    pub(crate) fn new(backend: Arc<dyn Backend>) -> Self {
        let runtime = tokio::runtime::Handle::try_current().ok();
        Engine {
            renewals: Renewals::new(backend.clone(), runtime.clone()),
            backend,
            leases: LeaseTable::default(),
            local: LocalWakeups::default(),
            runtime,
            background: Arc::default(),
        }
    }

    /// Waits until every release and leave queued in the background so far (dropped guards,
    /// cancelled or timed-out acquisitions) has finished.
    pub(crate) async fn flush(&self) {
        loop {
            let idle = self.background.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.background.running.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Adds a hold to `lease` if it is still this owner's holding (asks the store, which
    /// restarts the lease). `Ok(false)` if the holding is gone; nothing is taken then.
    pub(crate) async fn reenter(&self, lease: &Arc<HeldLease>) -> Result<bool> {
        reentrancy::reenter(&*self.backend, lease).await
    }

    /// Releases one hold of `lease`; `Ok(true)` if the holding was still ours.
    pub(crate) async fn release(&self, lease: &Arc<HeldLease>) -> Result<bool> {
        use tracing::Instrument;
        let span = tracing::debug_span!(
            "distlock.release",
            backend = self.backend.name(),
            lock = %lease.req.name,
            token = lease.token.get(),
        );
        let outcome = reentrancy::release(&*self.backend, lease)
            .instrument(span)
            .await?;
        if outcome.freed {
            self.local.released(&lease.req.name);
        }
        Ok(outcome.held)
    }

    /// Frees whatever holding `req.owner` has of the lock, without a guard.
    pub(crate) async fn release_by_owner(&self, req: &LockRequest) -> Result<bool> {
        let freed = self.backend.release(req, None).await?;
        if freed {
            self.local.released(&req.name);
        }
        Ok(freed)
    }

    /// Runs `fut` in the background, tracked for [`flush`](Engine::flush): on the current
    /// runtime, or on the one the engine was made on when called outside one (a guard dropped
    /// by a plain thread). Without either, the work is skipped: the lease covers it.
    pub(crate) fn spawn_detached<F>(&self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let Some(handle) = tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.runtime.clone())
        else {
            return;
        };
        self.background.running.fetch_add(1, Ordering::AcqRel);
        let done = Finished(self.background.clone());
        handle.spawn(async move {
            fut.await;
            drop(done);
        });
    }
}

/// A future run in the caller's task, or — if the caller drops it unfinished — run to its end in
/// the background ([`Engine::spawn_detached`], so [`Engine::flush`] waits for it): for steps the
/// store must see whole whatever the caller does, such as a release, which a dropped guard also
/// finishes in the background.
pub(crate) struct Finishing<T: Send + 'static> {
    engine: Arc<Engine>,
    step: Option<std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>>,
}

impl<T: Send + 'static> Finishing<T> {
    pub(crate) fn new(
        engine: Arc<Engine>,
        step: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Self {
        Finishing {
            engine,
            step: Some(Box::pin(step)),
        }
    }
}

impl<T: Send + 'static> std::future::Future for Finishing<T> {
    type Output = T;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<T> {
        let Some(step) = self.step.as_mut() else {
            panic!("Finishing polled after it finished");
        };
        let out = std::task::ready!(step.as_mut().poll(cx));
        self.step = None;
        std::task::Poll::Ready(out)
    }
}

impl<T: Send + 'static> Drop for Finishing<T> {
    fn drop(&mut self) {
        if let Some(step) = self.step.take() {
            self.engine.spawn_detached(async move {
                step.await;
            });
        }
    }
}

/// Counts a background task as finished when dropped: also when the task is cancelled.
struct Finished(Arc<Background>);

impl Drop for Finished {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
