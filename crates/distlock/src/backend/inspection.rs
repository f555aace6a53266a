//! Inspection, for operations: what a store says of its locks ([`crate::Client::status`],
//! `distlock status`) and the forced release of a wedged holder
//! ([`crate::Client::force_release`], `distlock release --force`).
//!
//! A store that can describe its locks and remove a holding by force implements [`Inspection`]
//! and answers it from [`Backend::inspection`](super::Backend::inspection); one that cannot
//! answers `None`, and both calls then answer [`crate::ErrorKind::Unsupported`].

use async_trait::async_trait;

use crate::error::Result;
use crate::status::{ForcedRelease, LockStatus, Selection};
use crate::types::{LockKind, LockName};

/// Describing a store's locks and removing holdings by force.
///
/// # Contract
///
/// * A status shows live holdings only, as the store sees them at one moment.
/// * A forced release advances the lock's fencing counter in the same atomic step as it
///   removes the holdings, so no later holding's token is at or below a removed one.
#[async_trait]
pub trait Inspection: Send + Sync {
    /// The locks `which` selects, as the store sees them now: each holding's token, the
    /// [`Holder`](crate::status::Holder) record and time of its take, its lease left; waiters
    /// where the store keeps them. A lock nobody holds or waits for may be left out. Expired
    /// holdings are not listed.
    async fn status(&self, which: &Selection) -> Result<Vec<LockStatus>>;

    /// Removes every holding of `name` of flavour `kind`, whoever holds it, and advances the
    /// lock's fencing counter in the same atomic step, so every later holding's token is above
    /// the removed ones: a newer holder's fenced write makes the resource refuse the old
    /// holder's, and the old holder's next renewal finds its holding gone (its `lost()`
    /// fires). Waiters keep their places. Answers what was removed. `kind` is one the store
    /// keeps ([`Capabilities::kinds`](super::Capabilities::kinds)): the client refuses the
    /// others before calling.
    async fn force_release(&self, name: &LockName, kind: LockKind) -> Result<ForcedRelease>;

    /// What the store's own configuration puts at risk, asked of the store now, one sentence
    /// each for an operator: what, on which server (never with a password), and what to change
    /// (Redis: a `maxmemory-policy` that may evict lock keys). Not an error: a store that
    /// cannot be asked answers none. The default has none.
    async fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
}
