//! [`Deadline`]: when a wait gives up, written once for every wait of the API (a lock, a
//! multi-lock, a latch, a campaign) and for a backend's retries.
//!
//! A wait is given as a `Duration` from now. One too long for the clock to represent
//! (`Duration::MAX`, years beyond what `Instant` holds) is a wait without end, as documented on
//! every `*_timeout` method: never an overflow, never a panic.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// When a waiter gives up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// One attempt, no waiting.
    Now,
    /// Wait until this instant.
    At(Instant),
    /// Wait as long as it takes.
    Never,
}

impl Deadline {
    /// `wait` from now; a wait past what the clock can represent is a wait without end.
    pub(crate) fn after(wait: Duration) -> Self {
        Instant::now()
            .checked_add(wait)
            .map_or(Deadline::Never, Deadline::At)
    }

    /// `wait` from now if there is one, else no end.
    pub(crate) fn within(wait: Option<Duration>) -> Self {
        wait.map_or(Deadline::Never, Deadline::after)
    }

    /// The time left before it passes: `Some(ZERO)` once it has (and for [`Deadline::Now`]),
    /// `None` for a wait without end.
    pub(crate) fn left(self) -> Option<Duration> {
        match self {
            Deadline::Now => Some(Duration::ZERO),
            Deadline::At(at) => Some(at.saturating_duration_since(Instant::now())),
            Deadline::Never => None,
        }
    }

    /// Whether it has passed (always, for [`Deadline::Now`]).
    pub(crate) fn passed(self) -> bool {
        self.left().is_some_and(|left| left.is_zero())
    }

    /// `work`'s output, or `None` if the deadline passes first. [`Deadline::Now`] polls it
    /// once: an answer ready at once is still taken.
    pub(crate) async fn bound<F: Future>(self, work: F) -> Option<F::Output> {
        match self {
            Deadline::Never => Some(work.await),
            Deadline::At(at) => tokio::time::timeout_at(at, work).await.ok(),
            Deadline::Now => futures_util::FutureExt::now_or_never(work),
        }
    }
}

/// The instant `wait` from now, for a retry loop that compares instants: a wait too long for
/// the clock ends at a point no run reaches (about 30 years on), never in an overflow.
#[cfg_attr(
    not(any(
        feature = "redis",
        feature = "redlock",
        feature = "etcd",
        feature = "zookeeper"
    )),
    allow(dead_code)
)]
pub(crate) fn instant_after(wait: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 24 * 3600);
    let now = Instant::now();
    now.checked_add(wait.min(FAR))
        .or_else(|| now.checked_add(Duration::from_secs(24 * 3600)))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_too_long_for_the_clock_never_ends_and_never_panics() {
        for wait in [
            Duration::MAX,
            Duration::from_secs(u64::MAX),
            Duration::new(u64::MAX, 999_999_999),
        ] {
            assert_eq!(Deadline::after(wait), Deadline::Never);
            assert_eq!(Deadline::after(wait).left(), None);
            assert!(!Deadline::after(wait).passed());
            assert!(instant_after(wait) > Instant::now() + Duration::from_secs(365 * 24 * 3600));
        }
        assert_eq!(Deadline::within(None), Deadline::Never);
    }

    #[test]
    fn a_short_wait_passes_and_now_has_passed_already() {
        assert!(Deadline::Now.passed());
        assert!(Deadline::after(Duration::ZERO).passed());
        let left = Deadline::after(Duration::from_secs(60)).left().unwrap();
        assert!(left > Duration::from_secs(59) && left <= Duration::from_secs(60));
    }

    #[tokio::test]
    async fn bound_gives_up_at_the_deadline_and_now_takes_a_ready_answer() {
        assert_eq!(Deadline::Now.bound(async { 7 }).await, Some(7));
        assert_eq!(
            Deadline::Now.bound(std::future::pending::<u8>()).await,
            None
        );
        let short = Deadline::after(Duration::from_millis(20));
        assert_eq!(short.bound(std::future::pending::<u8>()).await, None);
        assert_eq!(
            Deadline::after(Duration::MAX).bound(async { 3 }).await,
            Some(3)
        );
    }
}
