//! The arithmetic of Redlock, kept apart from the I/O so it can be tested alone: the majority,
//! the validity of a grant, and how long a loser should wait.

use std::time::Duration;

/// The smallest majority of `n` masters.
pub(super) fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// The clock drift allowed for a lease, as the Redis docs define it: 1% of the lease plus 2 ms
/// (for the masters' clocks ticking at different rates during the lease).
pub(super) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// How long a grant of `lease` is valid, counted from when its requests were sent (each master
/// started its share's lease no earlier than that): lease − drift, or `None` when the answers
/// came `elapsed` after the send, at or past that end (the grant is worthless by the time it is
/// known). The time the answers took is not taken off: the core counts a grant from the send
/// ([`crate::backend::Hold::Lease`]), so the holding ends at send + lease − drift, and what it
/// has left once the answers are in is the Redis docs' lease − elapsed − drift. Taking it off
/// here as well counted it twice.
pub(super) fn validity(lease: Duration, elapsed: Duration) -> Option<Duration> {
    lease
        .checked_sub(drift(lease))
        .filter(|valid_for| elapsed < *valid_for)
}

/// How long a loser should wait before trying again, given the lease left of each master that
/// answered "held" (`None`: unknown, counted as a whole `lease`) out of `n` masters: until enough
/// of those shares have expired that a majority could be free — or, when the holders together
/// hold no majority (a split vote, or masters that did not answer), a short random pause so the
/// contenders do not collide again.
pub(super) fn retry_after(
    n: usize,
    lease: Duration,
    held: &mut [Option<Duration>],
    jitter: Duration,
) -> Duration {
    let quorum = majority(n);
    // A majority is free once at most n − quorum masters are still held.
    let must_expire = held.len().saturating_sub(n - quorum);
    if must_expire == 0 {
        return jitter;
    }
    held.sort_by_key(|left| left.unwrap_or(lease));
    held[must_expire - 1].unwrap_or(lease).max(jitter)
}

/// The shortest tier of [`split_pause`].
const SPLIT_STEP: Duration = Duration::from_millis(2);

/// How long the loser of a split vote (no contender won a majority) that had won `won` masters
/// waits before trying again: a random pause within a tier as long as a round (`round`, at least
/// 2 ms), the tiers ordered by how close each contender came, so the one that won most tries
/// first and has finished its round when the others try and find it held, instead of all
/// colliding again after the same random pause.
pub(super) fn split_pause(quorum: usize, won: usize, round: Duration) -> Duration {
    let step = round.max(SPLIT_STEP);
    let behind = quorum.saturating_sub(won).max(1) as u32;
    step * behind + jitter(step)
}

/// How long a round on every master takes lately (a moving average): what the pauses that keep
/// contenders apart are measured in, since it is milliseconds on a loaded machine and a fraction
/// of one on an idle one.
pub(super) type RoundTime = crate::backends::moving_average::MovingAverage;

/// A random pause of at most `max` (µs resolution): the "retry after a random delay" of the
/// Redlock docs, so contenders do not collide again.
pub(super) fn jitter(max: Duration) -> Duration {
    let max_us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(getrandom::u64().unwrap_or(0) % max_us.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn majorities() {
        assert_eq!([3, 5, 7].map(majority), [2, 3, 4]);
    }

    #[test]
    fn validity_is_lease_minus_drift_from_the_send_if_the_answers_came_before_its_end() {
        assert_eq!(drift(Duration::from_secs(10)), MS(102));
        assert_eq!(validity(Duration::from_secs(10), MS(98)), Some(MS(9898)));
        assert_eq!(validity(MS(1000), MS(0)), Some(MS(988)));
        assert_eq!(validity(MS(1000), MS(987)), Some(MS(988)));
        assert_eq!(validity(MS(1000), MS(988)), None);
        assert_eq!(validity(MS(1000), MS(5000)), None);
        assert_eq!(validity(MS(1), MS(0)), None);
    }

    #[test]
    fn losers_wait_for_enough_shares_to_expire() {
        // 5 masters, all held: 3 must expire; the third shortest is 300 ms.
        let mut held = [
            Some(MS(500)),
            Some(MS(100)),
            None,
            Some(MS(300)),
            Some(MS(200)),
        ];
        assert_eq!(retry_after(5, MS(1000), &mut held, MS(3)), MS(300));
        // 3 held (a majority): 1 must expire.
        let mut held = [Some(MS(500)), Some(MS(100)), Some(MS(300))];
        assert_eq!(retry_after(5, MS(1000), &mut held, MS(3)), MS(100));
        // 2 held of 5: a split vote, or masters down: jitter only.
        let mut held = [Some(MS(500)), Some(MS(100))];
        assert_eq!(retry_after(5, MS(1000), &mut held, MS(3)), MS(3));
    }

    #[test]
    fn split_vote_losers_closest_to_a_majority_go_first() {
        for _ in 0..100 {
            let round = Duration::from_micros(300);
            let (two, one, none) = (
                split_pause(3, 2, round),
                split_pause(3, 1, round),
                split_pause(3, 0, round),
            );
            assert!(two >= MS(2) && two <= MS(4), "{two:?}");
            assert!(one >= MS(4) && one <= MS(6), "{one:?}");
            assert!(none >= MS(6) && none <= MS(8), "{none:?}");
        }
        let slow = split_pause(3, 2, MS(10));
        assert!(slow >= MS(10) && slow <= MS(20), "{slow:?}");
    }

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..100 {
            assert!(jitter(MS(5)) <= MS(5));
        }
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
    }
}
