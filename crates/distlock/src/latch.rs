//! The count-down latch: [`Latch`].
//!
//! Its count lives in the store (it outlives the process that set it), so processes on other
//! machines count down and wait on the same latch. Waiters read the count, then wait for the
//! store's notice that it reached 0 (Redis pub/sub, PostgreSQL `LISTEN`, SQLite's inotify on its
//! sidecar file) with a timer under it; MariaDB/MySQL cannot notify, so there waiters poll with a
//! jittered backoff of 10 to 250 ms.

use std::time::Duration;

use tracing::Instrument;

use crate::backend::Latches;
use crate::client::{Client, latches};
use crate::core::changes::Changes;
use crate::core::deadline::Deadline;
use crate::error::{Error, ErrorKind, Result};
use crate::types::LockName;

/// A count-down latch, by name. Made by [`Client::latch`].
///
/// One process sets the count; any process counts down; every waiter is released once the count
/// reaches 0. Once at 0 it can be set again (a new round): a waiter that had not yet seen the
/// 0 of the previous round then waits for the new one.
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> distlock::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let client = distlock::connect(&format!("sqlite:{}", dir.path().join("locks.db").display())).await?;
/// use std::time::Duration;
///
/// let latch = client.latch("deploy:42:migrations");
/// latch.try_set_count(3).await?;                     // false if a round is already running
/// // … in each of three workers, once its part is done:
/// # for _worker in 0..3 {
/// latch.count_down().await?;
/// # }
/// // … in any process that must wait for all three:
/// latch.wait_timeout(Duration::from_secs(60)).await?; // ErrorKind::Timeout after a minute
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Latch {
    client: Client,
    name: String,
}

impl Latch {
    /// The largest count [`try_set_count`](Latch::try_set_count) accepts.
    pub const MAX_COUNT: u64 = 1_000_000_000;

    pub(crate) fn new(client: Client, name: &str) -> Self {
        Latch {
            client,
            name: name.to_string(),
        }
    }

    /// The latch's name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The span of one operation `op` on this latch (one span name, `distlock.latch`, with the
    /// operation as a field).
    fn span(&self, op: &'static str) -> tracing::Span {
        tracing::debug_span!(
            "distlock.latch",
            backend = self.client.backend_name(),
            latch = %self.name,
            op,
        )
    }

    /// The store's latches and this latch's name, checked (the store first: on a store without
    /// latches every call answers that, whatever the name).
    fn key(&self) -> Result<(&dyn Latches, LockName)> {
        let counts = latches(self.client.backend().as_ref())?;
        let key = LockName::new(&self.name).map_err(|e| {
            Error::new(
                ErrorKind::InvalidName,
                format!("latch name: {}", e.message()),
            )
        })?;
        Ok((counts, key))
    }

    /// Sets the count to `count` if the latch is at 0 (or new): `Ok(true)`. `Ok(false)`, with
    /// nothing changed, while a count is running. [`ErrorKind::InvalidInput`] for 0 or more than
    /// [`MAX_COUNT`](Latch::MAX_COUNT).
    pub async fn try_set_count(&self, count: u64) -> Result<bool> {
        async {
            let (counts, key) = self.key()?;
            if count == 0 || count > Self::MAX_COUNT {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("a latch count is 1 ..= {}, got {count}", Self::MAX_COUNT),
                ));
            }
            counts.latch_set(&key, count).await
        }
        .instrument(self.span("set_count"))
        .await
    }

    /// Counts down by one (never below 0) and answers the count after. The step that reaches 0
    /// releases every waiter.
    ///
    /// # Cancel Safety
    ///
    /// If dropped before the store answers, the count may or may not have gone down.
    pub async fn count_down(&self) -> Result<u64> {
        async {
            let (counts, key) = self.key()?;
            counts.latch_count_down(&key).await
        }
        .instrument(self.span("count_down"))
        .await
    }

    /// The count now (0 for a latch never set).
    pub async fn count(&self) -> Result<u64> {
        async {
            let (counts, key) = self.key()?;
            counts.latch_count(&key).await
        }
        .instrument(self.span("count"))
        .await
    }

    /// Waits until the count is 0 (at once if it is).
    ///
    /// # Cancel Safety
    ///
    /// Cancel-safe: waiting leaves nothing in the store.
    pub async fn wait(&self) -> Result<()> {
        self.wait_until(Deadline::Never, Duration::MAX).await
    }

    /// Waits at most `wait` for the count to reach 0; [`ErrorKind::Timeout`] after that.
    ///
    /// # Cancel Safety
    ///
    /// Cancel-safe, as [`wait`](Latch::wait).
    pub async fn wait_timeout(&self, wait: Duration) -> Result<()> {
        self.wait_until(Deadline::after(wait), wait).await
    }

    async fn wait_until(&self, deadline: Deadline, wait: Duration) -> Result<()> {
        self.wait_for_zero(deadline, wait)
            .instrument(self.span("wait"))
            .await
    }

    /// Waits for 0 until `deadline` (`wait` from the start, for the message).
    async fn wait_for_zero(&self, deadline: Deadline, wait: Duration) -> Result<()> {
        let (counts, key) = self.key()?;
        let backend = self.client.backend();
        // Listen first, then read: a count-down to 0 between the two is not missed.
        let wakeups = counts.watch_latch(&key).await?;
        let mut changes = Changes::new(wakeups, backend.capabilities().notifies);
        loop {
            let count = counts.latch_count(&key).await?;
            if count == 0 {
                return Ok(());
            }
            if deadline.bound(changes.next()).await.is_none() {
                // One last look: the count may have reached 0 right at the deadline.
                if counts.latch_count(&key).await? == 0 {
                    return Ok(());
                }
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "latch {:?} still at {count} after {}",
                        self.name,
                        crate::types::show_duration(wait)
                    ),
                )
                .with_backend(backend.name()));
            }
        }
    }
}
