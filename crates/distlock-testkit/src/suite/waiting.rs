//! A contender waiting for a lock in a task of its own, for cases that do something to the
//! store or the holder while it waits.

use std::time::Duration;

use distlock::{FencingToken, Guard, Lock};
use tokio::task::JoinHandle;

use crate::{Failure, check};

/// A task in `lock.acquire_timeout(..)`.
pub(super) struct Waiting(JoinHandle<distlock::Result<Guard>>);

impl Waiting {
    /// Starts waiting for `lock`, giving up after `patience`.
    pub(super) fn start(lock: Lock, patience: Duration) -> Self {
        Waiting(tokio::spawn(
            async move { lock.acquire_timeout(patience).await },
        ))
    }

    /// Whether the wait ended (got the lock, or failed).
    pub(super) fn is_finished(&self) -> bool {
        self.0.is_finished()
    }

    /// How the wait ended: the lock, or the error the acquisition returned.
    pub(super) async fn answer(self) -> Result<distlock::Result<Guard>, Failure> {
        self.0
            .await
            .map_err(|e| Failure(format!("the waiter's task: {e}")))
    }

    /// The lock, once the waiter got it (within `within`), with a token above `above`; `after`
    /// says what happened before, for failure messages ("after the restart").
    pub(super) async fn gets_in(
        self,
        within: Duration,
        above: FencingToken,
        after: &str,
    ) -> Result<Guard, Failure> {
        let guard = tokio::time::timeout(within, self.answer())
            .await
            .map_err(|_| {
                Failure(format!(
                    "the waiter did not get in within {within:?} {after}"
                ))
            })??
            .map_err(|e| Failure(format!("the waiter's wait failed {after}: {e}")))?;
        check!(
            guard.fencing_token() > above,
            "the waiter's token {} {after} is not above {above}",
            guard.fencing_token()
        );
        Ok(guard)
    }
}
