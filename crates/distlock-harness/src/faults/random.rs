//! Cheap random numbers for fault timing (jitter, pauses, which process to hit): spread, not
//! secrecy, so splitmix64 over an atomic counter, shareable between tasks, without a dependency.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::monotonic_ns;

/// A splitmix64 generator, seeded from the clock and the process id.
#[derive(Debug)]
pub struct Random(AtomicU64);

impl Default for Random {
    fn default() -> Self {
        Random(AtomicU64::new(
            monotonic_ns() ^ (u64::from(std::process::id()) << 32),
        ))
    }
}

impl Random {
    /// The next 64 random bits.
    pub fn next_u64(&self) -> u64 {
        const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut z = self
            .0
            .fetch_add(GAMMA, Ordering::Relaxed)
            .wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// A duration in `0..=max`, uniformly.
    pub fn up_to(&self, max: Duration) -> Duration {
        Duration::from_nanos(self.below(max.as_nanos() as u64 + 1))
    }

    /// `mean` ± up to `spread`, uniformly, never below zero.
    pub fn around(&self, mean: Duration, spread: Duration) -> Duration {
        (mean + self.up_to(spread * 2)).saturating_sub(spread)
    }
}
