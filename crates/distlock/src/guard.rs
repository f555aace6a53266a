//! [`Guard`]: proof of holding a lock, with its fencing token and lost signal.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;

use crate::backend::{LockRequest, Released, Signal};
use crate::client::Client;
use crate::core::lease::HeldLease;
use crate::error::{Error, ErrorKind, Result};
use crate::types::{FencingToken, LockKind, LockName};

/// One hold of a lock. While it lives (and renewal is on) its lease is renewed every lease/3.
///
/// Release it with [`release`](Guard::release) to learn whether it was still held. Dropping it
/// releases in the background instead: the release is queued on the runtime, not immediate, and
/// if the runtime is gone the store frees the lock when the lease ends.
#[must_use = "dropping a guard releases the lock at once (in the background)"]
pub struct Guard {
    client: Client,
    lease: Arc<HeldLease>,
    released: bool,
}

impl Guard {
    pub(crate) fn new(
        client: Client,
        req: LockRequest,
        token: FencingToken,
        sent: Instant,
        renew: bool,
        session_lost: Option<Signal>,
    ) -> Self {
        let lease = client.inner.leases.join_or_start(
            &client.inner.backend,
            &req,
            token,
            sent,
            renew,
            session_lost,
        );
        Guard {
            client,
            lease,
            released: false,
        }
    }

    /// The fencing token of this holding: larger than that of every earlier holder of the name.
    /// Re-entering a lock keeps its token.
    pub fn fencing_token(&self) -> FencingToken {
        self.lease.token
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.lease.req.name
    }

    /// Which flavour of lock this guard holds.
    pub fn kind(&self) -> LockKind {
        self.lease.req.kind
    }

    /// Resolves (with an [`ErrorKind::LeaseLost`] error saying why) once the lease is lost:
    /// the store says the lock is no longer ours, renewal failed until the lease ran out, the
    /// store ended the holder's session, or — with renewal off — the lease simply ended.
    ///
    /// Race it against the protected work with `tokio::select!`. The future does not borrow the
    /// guard.
    pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        self.lease.lost()
    }

    /// True once [`lost`](Guard::lost) has fired.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Takes the same lock once more, as the same owner, without waiting: the store's hold count
    /// goes up and the new guard shares this one's lease and token. The lock is free again only
    /// when every guard is released.
    pub async fn reenter(&self) -> Result<Guard> {
        let req = self.lease.req.clone();
        let guard =
            crate::core::wait::acquire(&self.client, req, true, crate::core::wait::Deadline::Now)
                .await?;
        guard.ok_or_else(|| {
            Error::new(
                ErrorKind::LeaseLost,
                format!(
                    "lock {:?} could not be re-entered: this owner no longer holds it",
                    self.name()
                ),
            )
        })
    }

    /// Releases this hold. `Ok(true)` if it was still ours; `Ok(false)` if the lease had been
    /// lost (nothing is changed then: someone else's lock is never touched).
    ///
    /// # Cancel Safety
    ///
    /// If the future is dropped before the store answers, the release may or may not have
    /// happened; either way the lock is free at the latest when its lease ends.
    pub async fn release(mut self) -> Result<bool> {
        self.released = true;
        let outcome = release_one(&self.client, &self.lease.req).await?;
        Ok(outcome != Released::NotHeld)
    }

    /// Forgets this guard without releasing it: the hold stays in the store until its lease
    /// ends (renewal stops once no other guard shares the lease). For hand-overs to another
    /// process that knows the owner token.
    pub fn leak(mut self) {
        self.released = true;
    }
}

/// Releases one hold and wakes this client's next waiter if the lock became free.
pub(crate) async fn release_one(client: &Client, req: &LockRequest) -> Result<Released> {
    let outcome = client.inner.backend.release_if_owner(req).await?;
    if outcome == Released::Freed {
        client.inner.local.released(&req.name);
    }
    Ok(outcome)
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let client = self.client.clone();
        // The task keeps the lease (and its watchdog) alive until the release is done.
        let lease = self.lease.clone();
        crate::core::spawn_detached(self.client.inner.runtime.as_ref(), async move {
            if let Err(e) = release_one(&client, &lease.req).await {
                tracing::warn!(lock = %lease.req.name, "background release failed: {e}");
            }
            drop(lease);
        });
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("name", self.name())
            .field("kind", &self.kind())
            .field("fencing_token", &self.fencing_token())
            .field("lost", &self.is_lost())
            .finish()
    }
}
