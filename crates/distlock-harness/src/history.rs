//! The history checker: given every recorded hold of one lock, from any number of processes,
//! did two holds overlap, and did the fencing tokens increase in the order of the holds?
//!
//! Times are CLOCK_MONOTONIC nanoseconds ([`crate::monotonic_ns`]), one clock for every process
//! on the machine, so holds recorded by different processes can be put in one order. A hold is
//! recorded from `acquire` returning to just before `release` is called: that interval lies
//! inside the store's real hold, so an overlap seen here is a real violation, never an artefact
//! of measuring.
//!
//! Used by the suite's fencing case, `distlock bench` and `distlock torture` (which also asks
//! how soon the lock was taken again after a crash: [`next_start_after`]).

use std::fmt;

/// One hold of a lock, as a holder recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    /// When `acquire` returned (CLOCK_MONOTONIC ns).
    pub start_ns: u64,
    /// When the holder was about to release (CLOCK_MONOTONIC ns).
    pub end_ns: u64,
    /// The hold's fencing token.
    pub token: u64,
}

/// What [`check`] found in one lock's history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Holds checked.
    pub holds: usize,
    /// Holds that started before an earlier hold had ended.
    pub overlaps: u64,
    /// Holds whose token is not larger than every earlier hold's token.
    pub token_order_violations: u64,
    /// The first overlap: (the earlier hold still running, the hold that started during it).
    pub first_overlap: Option<(Hold, Hold)>,
    /// The first token out of order: (the earlier hold with the larger or equal token, the hold).
    pub first_token_order_violation: Option<(Hold, Hold)>,
}

impl Verdict {
    /// No overlap and every token in order.
    pub fn is_ok(&self) -> bool {
        self.overlaps == 0 && self.token_order_violations == 0
    }
}

impl fmt::Display for Verdict {
    /// One line: the counts and the first example of each violation.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} holds: {} overlaps, {} tokens out of order",
            self.holds, self.overlaps, self.token_order_violations
        )?;
        if let Some((earlier, later)) = self.first_overlap {
            write!(f, "; first overlap: {later:?} started during {earlier:?}")?;
        }
        if let Some((earlier, later)) = self.first_token_order_violation {
            write!(f, "; first token out of order: {later:?} after {earlier:?}")?;
        }
        Ok(())
    }
}

/// Checks the holds of ONE lock, in any order.
///
/// Each hold is compared with all the holds that started before it, not only its neighbour: a
/// long hold that several short ones overlap counts once per short hold, and a token is in order
/// only if it is larger than every earlier token (what a fenced resource demands).
pub fn check(holds: impl IntoIterator<Item = Hold>) -> Verdict {
    let mut holds: Vec<Hold> = holds.into_iter().collect();
    // Two holds starting in the same nanosecond cannot be ordered by the clock; taking them in
    // token order avoids reporting a token violation the clock cannot show (they overlap anyway
    // unless both are empty).
    holds.sort_unstable_by_key(|h| (h.start_ns, h.token));
    let overlaps = overlaps(&holds);
    let mut verdict = Verdict {
        holds: holds.len(),
        overlaps: overlaps.len() as u64,
        first_overlap: overlaps.first().map(|&(a, b)| (holds[a], holds[b])),
        ..Verdict::default()
    };
    let mut holds = holds.into_iter();
    let Some(mut largest_token) = holds.next() else {
        return verdict;
    };
    for hold in holds {
        if hold.token <= largest_token.token {
            verdict.token_order_violations += 1;
            verdict
                .first_token_order_violation
                .get_or_insert((largest_token, hold));
        }
        if hold.token > largest_token.token {
            largest_token = hold;
        }
    }
    verdict
}

/// Every overlap [`check`] counts, as indices into `holds` (any order): (the earlier hold still
/// running — of those, the one that ends last —, the hold that started during it), in the order
/// the later holds started. Who was overlapped, for a caller that asks whether something it did
/// to that holder explains it (`distlock torture`).
pub fn overlaps(holds: &[Hold]) -> Vec<(usize, usize)> {
    let mut order: Vec<usize> = (0..holds.len()).collect();
    // As in `check`: two holds starting in the same nanosecond are taken in token order.
    order.sort_unstable_by_key(|&i| (holds[i].start_ns, holds[i].token));
    let mut order = order.into_iter();
    let Some(mut latest_end) = order.next() else {
        return Vec::new();
    };
    let mut pairs = Vec::new();
    for i in order {
        if holds[i].start_ns < holds[latest_end].end_ns {
            pairs.push((latest_end, i));
        }
        if holds[i].end_ns > holds[latest_end].end_ns {
            latest_end = i;
        }
    }
    pairs
}

/// How long after `at_ns` the first hold that began after it began: for a holder that crashed
/// at `at_ns`, how long the lock stayed out of everyone's reach. `None` if no hold began after.
pub fn next_start_after(holds: impl IntoIterator<Item = Hold>, at_ns: u64) -> Option<u64> {
    holds
        .into_iter()
        .filter(|h| h.start_ns > at_ns)
        .map(|h| h.start_ns - at_ns)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(start_ns: u64, end_ns: u64, token: u64) -> Hold {
        Hold {
            start_ns,
            end_ns,
            token,
        }
    }

    #[test]
    fn an_empty_history_is_fine() {
        let verdict = check([]);
        assert!(verdict.is_ok());
        assert_eq!(verdict.holds, 0);
    }

    #[test]
    fn back_to_back_holds_with_rising_tokens_pass_in_any_input_order() {
        // One ends in the nanosecond the next starts: touching, not overlapping.
        let verdict = check([hold(20, 30, 3), hold(0, 10, 1), hold(10, 20, 2)]);
        assert!(verdict.is_ok(), "{verdict}");
        assert_eq!(verdict.holds, 3);
    }

    #[test]
    fn a_hold_starting_before_the_previous_ends_is_an_overlap() {
        let verdict = check([hold(0, 10, 1), hold(9, 20, 2)]);
        assert_eq!(verdict.overlaps, 1);
        assert_eq!(verdict.token_order_violations, 0);
        assert_eq!(
            verdict.first_overlap,
            Some((hold(0, 10, 1), hold(9, 20, 2)))
        );
        assert!(!verdict.is_ok());
    }

    #[test]
    fn a_long_hold_overlaps_every_hold_inside_it_not_only_its_neighbour() {
        let verdict = check([hold(0, 100, 1), hold(10, 20, 2), hold(30, 40, 3)]);
        assert_eq!(verdict.overlaps, 2, "{verdict}");
        assert_eq!(
            verdict.first_overlap,
            Some((hold(0, 100, 1), hold(10, 20, 2)))
        );
    }

    #[test]
    fn a_token_not_larger_than_the_one_before_is_out_of_order() {
        let verdict = check([hold(0, 10, 5), hold(10, 20, 5), hold(20, 30, 4)]);
        assert_eq!(verdict.overlaps, 0);
        assert_eq!(verdict.token_order_violations, 2, "{verdict}");
        assert_eq!(
            verdict.first_token_order_violation,
            Some((hold(0, 10, 5), hold(10, 20, 5)))
        );
    }

    #[test]
    fn a_token_must_beat_every_earlier_token_not_only_its_neighbour() {
        // 3 is larger than 2, its neighbour, but a resource that saw 9 refuses it.
        let verdict = check([hold(0, 1, 9), hold(1, 2, 2), hold(2, 3, 3), hold(3, 4, 10)]);
        assert_eq!(verdict.token_order_violations, 2, "{verdict}");
        assert_eq!(
            verdict.first_token_order_violation,
            Some((hold(0, 1, 9), hold(1, 2, 2)))
        );
    }

    #[test]
    fn overlaps_name_the_overlapped_hold_in_any_input_order() {
        // The long hold 0..100 (index 1) is overlapped twice; 150..160 overlaps nothing.
        let holds = [
            hold(30, 40, 3),
            hold(0, 100, 1),
            hold(150, 160, 4),
            hold(10, 20, 2),
        ];
        assert_eq!(overlaps(&holds), vec![(1, 3), (1, 0)]);
        assert_eq!(check(holds).overlaps, 2);
        assert!(overlaps(&[]).is_empty());
    }

    #[test]
    fn the_next_start_after_a_crash_is_the_earliest_later_hold() {
        let holds = [hold(0, 10, 1), hold(40, 50, 3), hold(25, 30, 2)];
        assert_eq!(next_start_after(holds, 5), Some(20));
        assert_eq!(next_start_after(holds, 40), None);
    }

    #[test]
    fn the_verdict_names_the_first_offending_holds() {
        let text = check([hold(0, 10, 2), hold(5, 15, 1)]).to_string();
        assert!(
            text.starts_with("2 holds: 1 overlaps, 1 tokens out of order"),
            "{text}"
        );
        assert!(text.contains("first overlap"), "{text}");
        assert!(text.contains("first token out of order"), "{text}");
    }
}
