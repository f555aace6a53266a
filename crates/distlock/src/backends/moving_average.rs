//! Loose in `backends/` because two stores of different families use it (etcd, a queue store,
//! and Redlock, a quorum of Redis masters): how long something takes lately, a moving average of
//! durations, shared by the tasks that time it (etcd's answer times, Redlock's rounds on every
//! master).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The average weighs the newest sample an eighth; the first sample is the average.
#[derive(Default)]
pub(crate) struct MovingAverage {
    micros: AtomicU64,
}

impl MovingAverage {
    /// Counts one more sample.
    pub(crate) fn record(&self, took: Duration) {
        let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        // A lost update between two samples recorded at once costs nothing here.
        let old = self.micros.load(Ordering::Relaxed);
        let new = if old == 0 {
            took
        } else {
            old - old / 8 + took / 8
        };
        self.micros.store(new, Ordering::Relaxed);
    }

    /// The average (zero before the first sample).
    pub(crate) fn get(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn follows_the_samples() {
        let r = MovingAverage::default();
        assert_eq!(r.get(), Duration::ZERO);
        r.record(MS(8));
        assert_eq!(r.get(), MS(8));
        for _ in 0..100 {
            r.record(MS(1));
        }
        assert!(r.get() < MS(2), "{:?}", r.get());
    }
}
