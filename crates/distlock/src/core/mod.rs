//! Behaviour written once for every backend: how a waiter waits ([`wait`]), how a held lease is
//! kept and how its loss is signalled ([`lease`]), and how reentrant holders share one lease
//! ([`reentrancy`]). Backends only supply the atomic steps of [`crate::backend::Backend`].

pub(crate) mod lease;
pub(crate) mod reentrancy;
pub(crate) mod wait;

#[cfg(test)]
mod tests;

pub(crate) use reentrancy::LeaseTable;
pub(crate) use wait::LocalWakeups;

/// Spawns `fut` on the current runtime, or on `fallback` when called outside one (a guard
/// dropped by a plain thread). Without either, the work is skipped: the lease covers it.
pub(crate) fn spawn_detached<F>(fallback: Option<&tokio::runtime::Handle>, fut: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(fut);
    } else if let Some(handle) = fallback {
        handle.spawn(fut);
    }
}
