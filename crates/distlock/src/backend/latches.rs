//! Count-down latches: a count kept in the store, counted down by anyone, waited for until it
//! reaches 0. [`crate::latch`] writes the waiting once; a store supplies the atomic steps on
//! the count.
//!
//! A store that can keep them implements [`Latches`] and answers it from
//! [`Backend::latches`](super::Backend::latches); one that cannot answers `None`, and every
//! latch call then answers [`crate::ErrorKind::Unsupported`].

use async_trait::async_trait;

use super::Wakeups;
use crate::error::Result;
use crate::types::LockName;

/// A latch's count in the store.
///
/// # Contract
///
/// Each step is atomic in the store; the count never goes below 0, and the step that reaches 0
/// notifies the latch's watchers (where the store notifies).
#[async_trait]
pub trait Latches: Send + Sync {
    /// Sets the latch's count to `count` (at least 1) if it is 0 or the latch does not exist;
    /// `Ok(false)`, with nothing changed, if a count is running.
    async fn latch_set(&self, latch: &LockName, count: u64) -> Result<bool>;

    /// Counts the latch down by one, never below 0, and answers the count after; the step that
    /// reaches 0 notifies the latch's watchers.
    async fn latch_count_down(&self, latch: &LockName) -> Result<u64>;

    /// The latch's count (0 if it does not exist).
    async fn latch_count(&self, latch: &LockName) -> Result<u64>;

    /// Starts listening for "the latch may have reached 0". The default never yields: the core
    /// then polls.
    async fn watch_latch(&self, _latch: &LockName) -> Result<Wakeups> {
        Ok(Box::pin(futures_util::stream::pending()))
    }
}
