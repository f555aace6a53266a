//! A waiter of the SQLite lock: tries to take it, and while it is held keeps a place with the
//! writer thread ([`Op::Park`]), so that a release in this process can hand it the lock in the
//! release's own transaction (see `writer.rs`). It also wakes on release notices (other
//! processes' releases, and releases past the hand-over limit), and the core bounds every
//! sleep by the lease left, as for any waiter.
//!
//! A grant that arrives is this waiter's holding from then on: the next poll returns it without
//! asking the store again. A waiter that leaves first gives up its place (answered by the
//! writer, so no grant can follow), then frees a grant it got meanwhile; a grant sent to a
//! waiter that is gone is freed by the writer.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::oneshot;

use super::handover::{Grant, Parked};
#[cfg(any(target_os = "linux", target_os = "android"))]
use super::writer::Failure;
use super::writer::{Op, Writer};
use super::{err, release, take};
use crate::backend::{Attempt, Hold, LockRequest, Waiter, Wakeups, next_notice};
use crate::error::Result;
use crate::types::FencingToken;

pub(super) struct SqliteWaiter {
    writer: Writer,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    notices: Option<std::sync::Arc<super::notices::Notices>>,
    req: LockRequest,
    wakeups: Option<Wakeups>,
    /// Our place with the writer: where a grant arrives.
    place: Option<oneshot::Receiver<Grant>>,
    /// A grant received, not yet returned by `poll`.
    granted: Option<Grant>,
}

impl SqliteWaiter {
    pub(super) fn new(
        writer: Writer,
        #[cfg(any(target_os = "linux", target_os = "android"))] notices: Option<
            std::sync::Arc<super::notices::Notices>,
        >,
        req: LockRequest,
    ) -> Self {
        SqliteWaiter {
            writer,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            notices,
            req,
            wakeups: None,
            place: None,
            granted: None,
        }
    }

    /// A grant that arrived, if any (without waiting).
    fn arrived(&mut self) -> Option<Grant> {
        if let Some(grant) = self.granted.take() {
            return Some(grant);
        }
        let place = self.place.as_mut()?;
        match place.try_recv() {
            Ok(grant) => {
                self.place = None;
                Some(grant)
            }
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(oneshot::error::TryRecvError::Closed) => {
                self.place = None;
                None
            }
        }
    }

    /// Takes a place in line for a hand-over.
    fn park(&mut self) {
        let (grant, place) = oneshot::channel();
        self.writer.park(
            self.req.name.as_str().to_string(),
            Parked {
                owner: self.req.owner.as_str().to_string(),
                lease_ms: self.req.lease.as_millis() as i64,
                grant,
            },
        );
        self.place = Some(place);
    }

    /// The holding a grant stands for, its lease counted from the grant's instant (the start
    /// of the transaction that took it, or the hand-over in memory).
    fn acquired(&self, grant: Grant) -> Attempt {
        let lease = Duration::from_millis(grant.lease_ms.max(0) as u64);
        Attempt::Acquired {
            token: FencingToken(grant.token as u64),
            hold: Hold::Lease {
                valid_for: lease.saturating_sub(grant.at.elapsed()),
            },
        }
    }
}

#[async_trait]
impl Waiter for SqliteWaiter {
    async fn poll(&mut self) -> Result<Attempt> {
        if let Some(grant) = self.arrived() {
            return Ok(self.acquired(grant));
        }
        // A lock this client holds for another owner is held: no need to ask the file, and a
        // place in line is kept (a release notice wakes every waiter of a process, and all but
        // one find the lock taken by another waiter of theirs).
        let name = self.req.name.as_str();
        if let Some(left) = self.writer.held_here(name, self.req.owner.as_str()) {
            if self.place.is_none() {
                self.park();
            }
            return Ok(Attempt::Held {
                retry_after: Some(left),
            });
        }
        // Woken in line (by a notice, or the lease's end): one waiter of this client asks at a
        // time; the others wait for its outcome (a hand-over, or the next notice). If its take
        // fails, they wait for the next notice, at most their lease, as after a lost notice.
        let _turn = match self.place {
            Some(_) => match self.writer.turn(name) {
                Some(turn) => Some(turn),
                None => return Ok(Attempt::Held { retry_after: None }),
            },
            None => None,
        };
        // The take gives up our place (the writer drops it before running the take), so no
        // grant follows it; one sent before it is picked up right after.
        let attempt = take(&self.writer, &self.req).await?;
        if let Attempt::Held { .. } = attempt {
            if let Some(grant) = self.arrived() {
                return Ok(self.acquired(grant));
            }
            self.park();
        }
        Ok(attempt)
    }

    async fn changed(&mut self) -> Result<()> {
        if self.granted.is_some() {
            return Ok(());
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let notices = self.notices.clone();
        let req = &self.req;
        let listen = next_notice(&mut self.wakeups, || {
            subscribe(
                #[cfg(any(target_os = "linux", target_os = "android"))]
                notices,
                req,
            )
        });
        let woke = match self.place.as_mut() {
            None => Woke::Noticed(listen.await),
            Some(place) => tokio::select! {
                granted = place => Woke::Granted(granted.ok()),
                noticed = listen => Woke::Noticed(noticed),
            },
        };
        match woke {
            // A closed place without a grant: the writer is gone; notices and timers remain.
            Woke::Granted(grant) => {
                self.place = None;
                self.granted = grant;
                Ok(())
            }
            Woke::Noticed(noticed) => noticed,
        }
    }

    async fn leave(&mut self) -> Result<()> {
        if self.place.is_some() {
            let op = Op::Unpark {
                name: self.req.name.as_str().to_string(),
                owner: self.req.owner.as_str().to_string(),
            };
            // Answered in the writer's order: after it, no grant for us can be sent.
            self.writer.run(op).await.map_err(err("leaving the wait"))?;
        }
        if let Some(grant) = self.arrived() {
            release(
                &self.writer,
                &self.req,
                Some(FencingToken(grant.token as u64)),
            )
            .await?;
        }
        Ok(())
    }
}

/// Listening for release notices of `req`'s lock (none without inotify).
async fn subscribe(
    #[cfg(any(target_os = "linux", target_os = "android"))] notices: Option<
        std::sync::Arc<super::notices::Notices>,
    >,
    req: &LockRequest,
) -> Result<Wakeups> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Some(notices) = notices {
        return notices
            .watch(super::sidecar::slot_of(req.name.as_str()))
            .map_err(|e| err("listening for releases")(Failure::Io(e)));
    }
    let _ = req;
    Ok(Box::pin(futures_util::stream::pending()))
}

/// What ended a wait.
enum Woke {
    Granted(Option<Grant>),
    Noticed(Result<()>),
}
