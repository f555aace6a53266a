//! Re-entry, counted here and only here: every guard of one owner's holding of one lock in this
//! client shares one [`HeldLease`] (one watchdog, one lost signal) and adds one to its hold
//! count; the store sees a single holding and is asked to free it when the last guard goes.
//!
//! What one owner does to one lock is serialised by a [`Slot`]: a take, a re-entry and the
//! release of the last hold never overlap, so a release in flight cannot free a holding that a
//! concurrent acquisition by the same owner has just been handed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Attempt, Backend, LockRequest, Waiter};
use crate::core::lease::{HeldLease, Terms};
use crate::core::renewals::Renewals;
use crate::error::Result;
use crate::types::{LockKind, LockName, OwnerToken};

type Key = (LockName, LockKind, OwnerToken);
type Slots = Mutex<HashMap<Key, Weak<Slot>>>;

/// One owner's turn at one lock, and the holding it has now (if any).
pub(crate) struct Slot {
    current: tokio::sync::Mutex<Weak<HeldLease>>,
    key: Key,
    table: Weak<Slots>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(table) = self.table.upgrade() {
            let mut slots = table.lock().unwrap_or_else(|p| p.into_inner());
            if slots.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
                slots.remove(&self.key);
            }
        }
    }
}

/// The answer to one attempt at a lock.
pub(crate) enum Taken {
    /// The caller holds it: a new holding, or one more hold of the owner's live one.
    Got(Arc<HeldLease>),
    /// Someone else holds it; their lease has this long left, if the store knows.
    Held(Option<Duration>),
}

/// The holdings of one client, by (name, flavour, owner).
#[derive(Default)]
pub(crate) struct LeaseTable {
    slots: Arc<Slots>,
}

impl LeaseTable {
    fn slot(&self, req: &LockRequest) -> Arc<Slot> {
        let key: Key = (req.name.clone(), req.kind, req.owner.clone());
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = slots.get(&key).and_then(Weak::upgrade) {
            return slot;
        }
        let slot = Arc::new(Slot {
            current: tokio::sync::Mutex::new(Weak::new()),
            key: key.clone(),
            table: Arc::downgrade(&self.slots),
        });
        slots.insert(key, Arc::downgrade(&slot));
        slot
    }

    /// The owner's holding of the lock in this client, if it has one.
    pub(crate) fn holding(&self, req: &LockRequest) -> Option<Arc<HeldLease>> {
        let key: Key = (req.name.clone(), req.kind, req.owner.clone());
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)?
            .upgrade()?;
        slot.current.try_lock().ok()?.upgrade()
    }

    /// One attempt: re-enter the owner's live holding (confirmed by the store), or ask the
    /// waiter to take the lock.
    pub(crate) async fn take(
        &self,
        backend: &Arc<dyn Backend>,
        renewals: &Arc<Renewals>,
        req: &LockRequest,
        terms: Terms,
        waiter: &mut dyn Waiter,
    ) -> Result<Taken> {
        let slot = self.slot(req);
        let mut current = slot.current.lock().await;
        if let Some(lease) = current.upgrade().filter(|l| l.is_live())
            && add_confirmed_hold(&**backend, &lease).await?
        {
            return Ok(Taken::Got(lease));
        }
        let sent = Instant::now();
        match waiter.poll().await? {
            Attempt::Acquired { token, hold } => {
                let lease = HeldLease::start(
                    backend,
                    renewals,
                    terms,
                    req.clone(),
                    token,
                    (sent, hold),
                    slot.clone(),
                );
                *current = Arc::downgrade(&lease);
                Ok(Taken::Got(lease))
            }
            Attempt::Held { retry_after } => Ok(Taken::Held(retry_after)),
        }
    }
}

/// Adds a hold to `lease` if it is still live and the store confirms it is still this exact
/// holding (which restarts its lease). `Ok(false)` (and nothing held) otherwise.
pub(crate) async fn reenter(backend: &dyn Backend, lease: &Arc<HeldLease>) -> Result<bool> {
    let _turn = lease.slot.current.lock().await;
    if !lease.is_live() {
        return Ok(false);
    }
    add_confirmed_hold(backend, lease).await
}

async fn add_confirmed_hold(backend: &dyn Backend, lease: &HeldLease) -> Result<bool> {
    // Counted before the round trip so that the watchdog keeps running whatever other guards do.
    lease.add_hold();
    let confirmed = still_ours(backend, lease).await;
    if !matches!(confirmed, Ok(true)) {
        lease.drop_hold();
    }
    confirmed
}

/// Whether the store still lists `lease` as its owner's holding (which restarts its lease); a
/// holding it no longer lists is marked lost, so that its other guards learn it too.
async fn still_ours(backend: &dyn Backend, lease: &HeldLease) -> Result<bool> {
    let sent = Instant::now();
    match backend.extend(&lease.req, lease.token).await? {
        Some(valid_for) => Ok(lease.confirm(sent, valid_for)),
        None => {
            lease.mark_lost("the store no longer lists this holding as the owner");
            Ok(false)
        }
    }
}

/// What releasing one guard did.
pub(crate) struct Released {
    /// The holding was still ours (by the store's word for the last hold, by our clock before).
    pub(crate) held: bool,
    /// The store freed the lock: local waiters may go.
    pub(crate) freed: bool,
}

/// Releases one guard's hold; the last one frees the lock in the store, naming the holding by
/// its token so that a newer holding of the same owner is never touched. A holding already lost
/// is not sent to the store: it is no longer ours to free.
///
/// A hold that is not the last asks the store whether the holding is still this one (a renewal
/// by token), since our clock cannot know that it was freed by owner token or forced from
/// elsewhere: every hold of a holding that is gone answers `held: false`, not only the last.
pub(crate) async fn release(backend: &dyn Backend, lease: &Arc<HeldLease>) -> Result<Released> {
    let mut current = lease.slot.current.lock().await;
    let lost = lease.is_lost();
    if lease.drop_hold() > 0 {
        let held = !lost && still_ours(backend, lease).await?;
        return Ok(Released { held, freed: false });
    }
    if std::ptr::eq(current.as_ptr(), Arc::as_ptr(lease)) {
        *current = Weak::new();
    }
    if lost {
        // An unrenewed session hold whose lease ran out is freed by the task that watches it,
        // which the last hold's going has just stopped: freed here instead (by its token).
        let freed = lease.lease_ran_out() && backend.release(&lease.req, Some(lease.token)).await?;
        return Ok(Released { held: false, freed });
    }
    let freed = backend.release(&lease.req, Some(lease.token)).await?;
    Ok(Released { held: freed, freed })
}
