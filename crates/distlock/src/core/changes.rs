//! Waiting for "something in the store may have changed" (an election's log grew, a latch reached
//! 0), written once for every backend: the store's notices where it has them, and always a timer
//! under them, so a lost notice costs one nap, never a hang.
//!
//! * A store that notifies ([`Capabilities::notifies`](crate::backend::Capabilities)): the timer
//!   is only a safety net, [`SAFETY_NAP`] with jitter.
//! * A store that cannot notify (MariaDB/MySQL): a bounded jittered poll, from [`POLL_MIN`]
//!   doubling to [`POLL_MAX`] while nothing changes; the caller calls [`Changes::reset`] when it
//!   saw a change, so a busy election is followed closely and an idle one costs little.

use std::time::Duration;

use futures_util::StreamExt;

use crate::backend::Wakeups;

/// The timer under a store's notices.
pub(crate) const SAFETY_NAP: Duration = Duration::from_secs(1);
/// The first poll nap of a store without notices.
pub(crate) const POLL_MIN: Duration = Duration::from_millis(10);
/// The longest poll nap of a store without notices.
pub(crate) const POLL_MAX: Duration = Duration::from_millis(250);

/// One watcher's notices and timer.
pub(crate) struct Changes {
    wakeups: Wakeups,
    notifies: bool,
    nap: Duration,
}

impl Changes {
    /// Over `wakeups` (already listening); `notifies` says whether they mean anything.
    pub(crate) fn new(wakeups: Wakeups, notifies: bool) -> Self {
        Changes {
            wakeups,
            notifies,
            nap: POLL_MIN,
        }
    }

    /// The watcher saw a change: poll closely again.
    pub(crate) fn reset(&mut self) {
        self.nap = POLL_MIN;
    }

    /// Resolves at the next notice or when the nap is over, whichever comes first. The nap is
    /// a random point in the upper half of its step, so many watchers do not read in lockstep.
    pub(crate) async fn next(&mut self) {
        let step = if self.notifies {
            SAFETY_NAP
        } else {
            let step = self.nap;
            self.nap = (self.nap * 2).min(POLL_MAX);
            step
        };
        let half = step.as_micros() as u64 / 2;
        let nap = Duration::from_micros(half + getrandom::u64().unwrap_or(0) % (half + 1));
        tokio::select! {
            next = self.wakeups.next() => {
                if next.is_none() {
                    // The stream ended: the timer alone from now on.
                    self.wakeups = Box::pin(futures_util::stream::pending());
                    self.notifies = false;
                }
            }
            _ = tokio::time::sleep(nap) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn polls_back_off_to_the_cap_and_reset() {
        let mut c = Changes::new(Box::pin(futures_util::stream::pending()), false);
        let started = tokio::time::Instant::now();
        for _ in 0..10 {
            c.next().await;
        }
        let waited = started.elapsed();
        // 10+20+40+80+160 ms then 250 ms naps, each at least half its step.
        assert!(waited >= Duration::from_millis(780), "{waited:?}");
        assert!(waited <= Duration::from_millis(1560), "{waited:?}");
        c.reset();
        let at = tokio::time::Instant::now();
        c.next().await;
        assert!(at.elapsed() <= POLL_MIN);
    }

    #[tokio::test(start_paused = true)]
    async fn a_notice_ends_the_nap() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let stream =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|()| ((), rx)) },
            );
        let mut c = Changes::new(Box::pin(stream), true);
        tx.send(()).unwrap();
        let at = tokio::time::Instant::now();
        c.next().await;
        assert!(at.elapsed() < Duration::from_millis(1));
    }
}
