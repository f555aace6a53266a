//! A waiter of a fair lock, read-write lock or semaphore in the SQLite file.
//!
//! The first poll is a one-off attempt that never queues (a `try_acquire` leaves no place
//! behind). The first [`changed`](Waiter::changed) starts listening on the synchronizer's
//! sidecar counter and answers at once; every poll after that waits in line (a fair waiter
//! keeps its place in arrival order, a waiting writer holds new readers back) and goes by the
//! semaphore size the file keeps, so a resize while it waits lets it in or keeps it waiting.
//! Each "held" answer is at most a third of the place's lease, so a live waiter asks again, and
//! keeps its place, long before it lapses. Leaving removes the place and wakes the others.

use async_trait::async_trait;

use super::flavours::{FlavourOp, Side};
use super::writer::Writer;
use super::{flavour_run, take_answer};
use crate::backend::{Attempt, LockRequest, Waiter, Wakeups, next_notice};
use crate::error::Result;

pub(super) struct FlavourWaiter {
    writer: Writer,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    notices: Option<std::sync::Arc<super::notices::Notices>>,
    req: LockRequest,
    side: Side,
    /// Set once listening: from then on, polls wait in line.
    wakeups: Option<Wakeups>,
    /// Whether a poll may have put this waiter in line.
    queued: bool,
}

impl FlavourWaiter {
    pub(super) fn new(
        writer: Writer,
        #[cfg(any(target_os = "linux", target_os = "android"))] notices: Option<
            std::sync::Arc<super::notices::Notices>,
        >,
        req: LockRequest,
        side: Side,
    ) -> Self {
        FlavourWaiter {
            writer,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            notices,
            req,
            side,
            wakeups: None,
            queued: false,
        }
    }
}

#[async_trait]
impl Waiter for FlavourWaiter {
    async fn poll(&mut self) -> Result<Attempt> {
        let in_line = self.wakeups.is_some();
        self.queued |= in_line;
        let answer = flavour_run(
            &self.writer,
            super::take_op(&self.req, self.side, in_line),
            "taking the lock",
        )
        .await?;
        // The first answer checked a semaphore's size: later attempts go by the kept one.
        self.req.follows_resize = true;
        take_answer(answer, &self.req)
    }

    async fn changed(&mut self) -> Result<()> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let notices = self.notices.clone();
        let slot = super::flavours::slot(self.side.family(), self.req.name.as_str());
        next_notice(&mut self.wakeups, || async move {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            if let Some(notices) = notices {
                return notices.watch(slot).map_err(|e| {
                    super::err("listening for releases")(super::writer::Failure::Io(e))
                });
            }
            let _ = slot;
            Ok(Box::pin(futures_util::stream::pending()) as Wakeups)
        })
        .await
    }

    async fn leave(&mut self) -> Result<()> {
        if !self.queued {
            return Ok(());
        }
        let op = FlavourOp::Leave {
            side: self.side,
            name: self.req.name.as_str().to_string(),
            owner: self.req.owner.as_str().to_string(),
        };
        flavour_run(&self.writer, op, "leaving the wait").await?;
        Ok(())
    }
}
