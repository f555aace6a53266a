//! The fair lock's waiter: it takes a place in the lock's queue once it listens for its turn,
//! keeps the place alive by asking again, and removes it when it gives up.
//!
//! The first poll is a one-off attempt that never queues (a `try_acquire` leaves no place
//! behind). The first [`changed`](Waiter::changed) subscribes to the lock's channel under the
//! SHA-1 of the owner token — the release wakes only the head of the queue, by that digest —
//! and answers at once; every poll after that waits in line.

use std::sync::Arc;

use async_trait::async_trait;

use super::invoke::Server;
use super::keys::Keys;
use super::scripts::SCRIPTS;
use super::take;
use crate::backend::{Attempt, LockRequest, Waiter, Wakeups, next_notice};
use crate::error::Result;

pub(super) struct FairWaiter {
    server: Arc<Server>,
    req: LockRequest,
    keys: Keys,
    /// Set once subscribed: from then on, polls wait in line.
    turns: Option<Wakeups>,
    /// Whether a poll may have put this waiter in the queue.
    queued: bool,
}

impl FairWaiter {
    pub(super) fn new(server: Arc<Server>, req: LockRequest) -> Self {
        let keys = Keys::new(&server.prefix, req.kind, &req.name);
        FairWaiter {
            server,
            req,
            keys,
            turns: None,
            queued: false,
        }
    }
}

#[async_trait]
impl Waiter for FairWaiter {
    async fn poll(&mut self) -> Result<Attempt> {
        let in_line = self.turns.is_some();
        self.queued |= in_line;
        take(&self.server, &self.req, &self.keys, in_line).await
    }

    async fn changed(&mut self) -> Result<()> {
        let (server, keys, owner) = (&self.server, &self.keys, &self.req.owner);
        let subscribe = || async move {
            // The release names the head of the queue by the SHA-1 of its owner token.
            let digest = sha1_smol::Sha1::from(owner.as_str()).digest().to_string();
            Ok(server.subscriber.watch(keys.channel(), Some(digest)).await)
        };
        next_notice(&mut self.turns, subscribe).await
    }

    async fn leave(&mut self) -> Result<()> {
        if !self.queued {
            return Ok(());
        }
        let args = [self.req.owner.as_str(), &self.keys.channel()];
        let what = "leaving a fair lock's queue";
        let _: i64 = self
            .server
            .run(&SCRIPTS.fair_abandon, &self.keys.abandon(), &args, what)
            .await?;
        Ok(())
    }
}
