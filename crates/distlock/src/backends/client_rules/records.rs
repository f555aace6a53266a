//! The decision of a fenced election write, shared by the SQL backends, which read and lock the
//! election's row, decide here, then write, and by the in-memory backend under its mutex (the
//! Redis and SQLite backends decide the same way in their script and writer op).

/// What a fenced write of `(term, value)` does to an election whose row holds the latest entry
/// `seq` with `value`, and the largest term written `max_term`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// A larger term was written: change nothing, answer false.
    Refuse,
    /// The same term and value (a refresh): only restart the record's TTL.
    Refresh,
    /// A new entry numbered `seq`: update the row, append to the log, notify.
    Append { seq: i64 },
}

pub(crate) fn step(
    seq: i64,
    max_term: i64,
    old: Option<&str>,
    term: i64,
    value: Option<&str>,
) -> Step {
    if term < max_term {
        Step::Refuse
    } else if term == max_term && seq > 0 && old == value {
        Step::Refresh
    } else {
        Step::Append { seq: seq + 1 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_fenced_and_refreshes_append_nothing() {
        assert_eq!(step(0, 0, None, 5, Some("a")), Step::Append { seq: 1 });
        assert_eq!(step(1, 5, Some("a"), 5, Some("a")), Step::Refresh);
        assert_eq!(step(1, 5, Some("a"), 5, Some("b")), Step::Append { seq: 2 });
        assert_eq!(step(2, 5, Some("b"), 5, None), Step::Append { seq: 3 });
        assert_eq!(step(3, 5, None, 4, Some("old")), Step::Refuse);
        assert_eq!(step(3, 5, None, 9, Some("c")), Step::Append { seq: 4 });
    }
}
