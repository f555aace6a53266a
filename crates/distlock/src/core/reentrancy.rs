//! Reentrant holders share one [`HeldLease`]: one watchdog and one lost signal per
//! (name, flavour, owner), however many guards re-entered it. The hold count itself lives in
//! the store; this table only avoids renewing the same lease once per guard.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::time::Instant;

use crate::backend::{Backend, LockRequest, Signal};
use crate::core::lease::HeldLease;
use crate::types::{FencingToken, LockKind, LockName, OwnerToken};

type Key = (LockName, LockKind, OwnerToken);

/// The leases this client holds, by (name, flavour, owner).
#[derive(Default, Clone)]
pub(crate) struct LeaseTable {
    held: Arc<Mutex<HashMap<Key, Weak<HeldLease>>>>,
}

impl LeaseTable {
    /// The shared lease for a holding just acquired: the existing one when this acquisition
    /// re-entered it (same token), a new one with its own watchdog otherwise.
    pub(crate) fn join_or_start(
        &self,
        backend: &Arc<dyn Backend>,
        req: &LockRequest,
        token: FencingToken,
        sent: Instant,
        renew: bool,
        session_lost: Option<Signal>,
    ) -> Arc<HeldLease> {
        let key: Key = (req.name.clone(), req.kind, req.owner.clone());
        // Declared before the table's guard so it drops after it: dropping the last reference
        // to a stale lease takes the table's lock (see `set_on_drop`).
        let stale: Option<Arc<HeldLease>>;
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = held.get(&key).and_then(Weak::upgrade) {
            // Same token means the store counted this as one more hold of the same holding.
            if existing.token == token && !existing.is_lost() {
                return existing;
            }
            stale = Some(existing);
        } else {
            stale = None;
        }
        let mut lease = HeldLease::start(
            backend.clone(),
            req.clone(),
            token,
            sent,
            renew,
            session_lost,
        );
        let table = self.held.clone();
        let drop_key = key.clone();
        lease.set_on_drop(move || {
            let mut held = table.lock().unwrap_or_else(|p| p.into_inner());
            if held.get(&drop_key).is_some_and(|w| w.strong_count() == 0) {
                held.remove(&drop_key);
            }
        });
        let lease = Arc::new(lease);
        held.insert(key, Arc::downgrade(&lease));
        drop(held);
        drop(stale);
        lease
    }
}
