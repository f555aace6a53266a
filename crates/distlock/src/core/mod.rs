//! Behaviour written once for every backend: how a waiter waits ([`wait`]), how a held lease is
//! kept and how its loss is signalled ([`lease`]), and how reentrant holders share one holding
//! ([`reentrancy`]). Backends only supply the atomic steps of [`crate::backend::Backend`]; the
//! user API (`Client`, `Lock`, `Guard`) wraps the [`Engine`] and the holdings it hands out.

pub(crate) mod lease;
pub(crate) mod reentrancy;
pub(crate) mod wait;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use crate::backend::{Backend, LockRequest};
use crate::error::Result;
use lease::HeldLease;
use reentrancy::LeaseTable;
use wait::LocalWakeups;

/// One client's machinery: the store, the holdings it has, and the in-process wake-ups.
pub(crate) struct Engine {
    pub(crate) backend: Arc<dyn Backend>,
    leases: LeaseTable,
    local: LocalWakeups,
    /// Where work queued outside a runtime (a guard dropped by a plain thread) runs.
    runtime: Option<tokio::runtime::Handle>,
}

impl Engine {
    pub(crate) fn new(backend: Arc<dyn Backend>) -> Self {
        Engine {
            backend,
            leases: LeaseTable::default(),
            local: LocalWakeups::default(),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// Adds a hold to `lease` if it is still this owner's holding (asks the store, which
    /// restarts the lease). `Ok(false)` if the holding is gone; nothing is taken then.
    pub(crate) async fn reenter(&self, lease: &Arc<HeldLease>) -> Result<bool> {
        reentrancy::reenter(&*self.backend, lease).await
    }

    /// Releases one hold of `lease`; `Ok(true)` if the holding was still ours.
    pub(crate) async fn release(&self, lease: &Arc<HeldLease>) -> Result<bool> {
        let outcome = reentrancy::release(&*self.backend, lease).await?;
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

    /// Spawns `fut` on the current runtime, or on the one the engine was made on.
    pub(crate) fn spawn_detached<F>(&self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        spawn_detached(self.runtime.as_ref(), fut);
    }
}

/// Spawns `fut` on the current runtime, or on `fallback` when called outside one (a guard
/// dropped by a plain thread). Without either, the work is skipped: the lease covers it.
fn spawn_detached<F>(fallback: Option<&tokio::runtime::Handle>, fut: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(fut);
    } else if let Some(handle) = fallback {
        handle.spawn(fut);
    }
}
