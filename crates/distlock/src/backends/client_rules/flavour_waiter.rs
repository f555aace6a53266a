//! The waiter of a fair lock, read-write lock or semaphore on the PostgreSQL and MySQL
//! backends, and on the in-memory one: the same steps over each store's own statements, or its
//! map ([`FlavourSteps`]).
//!
//! The first poll is a one-off attempt that never queues (a `try_acquire` leaves no place
//! behind). The first [`changed`](Waiter::changed) starts listening for the synchronizer's
//! notices and answers at once; every poll after that waits in line (a fair waiter keeps its
//! place in arrival order, a waiting writer holds new readers back) and goes by the semaphore
//! size the store keeps, so a resize while it waits lets it in or keeps it waiting. Leaving
//! removes the place and tells the others.

use std::sync::Arc;

use async_trait::async_trait;

use crate::backend::{Attempt, LockRequest, Waiter, Wakeups, next_notice};
use crate::backends::client_rules::flavour_rules::Side;
use crate::error::Result;

/// The store's steps a waiter needs.
#[async_trait]
pub(crate) trait FlavourSteps: Send + Sync + 'static {
    /// One take of `side`; with `queue`, a blocked fair waiter or writer keeps its place.
    async fn take(&self, req: &LockRequest, side: Side, queue: bool) -> Result<Attempt>;
    /// Gives up the owner's place in line.
    async fn leave(&self, req: &LockRequest, side: Side) -> Result<()>;
    /// Starts listening for the synchronizer's notices (releases, leavers, resizes).
    async fn watch(&self, req: &LockRequest, side: Side) -> Result<Wakeups>;
    /// Whether `watch` wakes on every change although the store does not notify (see
    /// [`Waiter::watched`]).
    fn watched(&self) -> bool {
        false
    }
}

pub(crate) struct SqlFlavourWaiter {
    steps: Arc<dyn FlavourSteps>,
    req: LockRequest,
    side: Side,
    /// Set once listening: from then on, polls wait in line.
    wakeups: Option<Wakeups>,
    /// Whether a poll may have put this waiter in line.
    queued: bool,
}

impl SqlFlavourWaiter {
    pub(crate) fn new(steps: Arc<dyn FlavourSteps>, req: LockRequest, side: Side) -> Self {
        SqlFlavourWaiter {
            steps,
            req,
            side,
            wakeups: None,
            queued: false,
        }
    }
}

#[async_trait]
impl Waiter for SqlFlavourWaiter {
    async fn poll(&mut self) -> Result<Attempt> {
        let in_line = self.wakeups.is_some();
        self.queued |= in_line;
        let attempt = self.steps.take(&self.req, self.side, in_line).await?;
        // The first answer checked a semaphore's size: later attempts go by the kept one.
        self.req.follows_resize = true;
        Ok(attempt)
    }

    async fn changed(&mut self) -> Result<()> {
        let (steps, req, side) = (&self.steps, &self.req, self.side);
        next_notice(&mut self.wakeups, || steps.watch(req, side)).await
    }

    fn watched(&self) -> bool {
        self.steps.watched()
    }

    async fn leave(&mut self) -> Result<()> {
        if self.queued {
            self.steps.leave(&self.req, self.side).await?;
        }
        Ok(())
    }
}
