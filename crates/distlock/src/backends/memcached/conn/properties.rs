//! Property tests of what distlock reads from memcached: a reply line's announced length and
//! flags, and the lock item's value. No reply makes them panic or allocate without bound, and
//! every value distlock writes reads back as it was written.

use proptest::prelude::*;

use super::super::ops::{holding_part, parse_took, parse_value, value};
use super::{MAX_VALUE_LEN, flag, value_len};

/// Reply lines as a server (or a corrupt stream) could write them.
fn reply_line() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("VA".to_string()),
        Just("EN".to_string()),
        Just("HD".to_string()),
        Just("18446744073709551615".to_string()),
        Just("18446744073709551616".to_string()),
        Just("-1".to_string()),
        "[0-9]{1,8}",
        "[ctvNJ][0-9-]{0,21}",
        "\\PC{0,6}",
    ];
    proptest::collection::vec(token, 0..8).prop_map(|tokens| tokens.join(" "))
}

proptest! {
    #[test]
    fn no_reply_line_panics_or_announces_an_unbounded_value(line in reply_line()) {
        if let Some(len) = value_len(&line) {
            prop_assert!(len <= MAX_VALUE_LEN, "{line:?} announced {len}");
        }
        let tokens: Vec<&str> = line.split(' ').collect();
        let _ = flag::<u64>(&tokens, 'c');
        let _ = flag::<i64>(&tokens, 't');
    }

    #[test]
    fn an_announced_length_reads_back(len in 0..=MAX_VALUE_LEN, cas in any::<u64>(), ttl in -1i64..100_000) {
        let line = format!("VA {len} c{cas} t{ttl}");
        prop_assert_eq!(value_len(&line), Some(len));
        let tokens: Vec<&str> = line.split(' ').skip(2).collect();
        prop_assert_eq!(flag::<u64>(&tokens, 'c'), Some(cas));
        prop_assert_eq!(flag::<i64>(&tokens, 't'), Some(ttl));
    }

    #[test]
    fn a_lock_value_reads_back_as_written(
        owner in "[0-9a-f]{32}",
        token in proptest::option::of(any::<u64>()),
        took in proptest::option::of(("[0-9]{1,13}", "[ -~&&[^\n]]{0,40}")),
    ) {
        let holding = value(&owner, token);
        let stored = match &took {
            Some((ms, record)) => format!("{ms}\t{record}\n{holding}"),
            None => holding.clone(),
        };
        prop_assert_eq!(holding_part(&stored), holding.as_str());
        let (read_owner, read_token) = parse_value(&stored).unwrap();
        prop_assert_eq!(read_owner, owner.as_str());
        prop_assert_eq!(read_token, token);
        let (ms, record) = parse_took(&stored);
        match &took {
            Some((written_ms, written_record)) => {
                prop_assert_eq!(ms, written_ms.parse().ok());
                prop_assert_eq!(record, Some(written_record.as_str()));
            }
            None => prop_assert_eq!((ms, record), (None, None)),
        }
    }

    #[test]
    fn no_stored_value_panics(stored in "\\PC{0,64}|[0-9a-f \t\n-]{0,64}") {
        let _ = holding_part(&stored);
        let _ = parse_took(&stored);
        let _ = parse_value(&stored);
    }
}

/// A CAS past i64::MAX reads as itself (it was parsed as an i64, and such an item refused as
/// "a corrupt reply"), found by `an_announced_length_reads_back`.
#[test]
fn a_cas_past_i64_max_reads_back() {
    let tokens = ["c9223372036854775808", "t-1"];
    assert_eq!(flag::<u64>(&tokens, 'c'), Some(9_223_372_036_854_775_808));
    assert_eq!(flag::<i64>(&tokens, 't'), Some(-1));
}

/// A length past what distlock ever stores is a corrupt reply: refused, not allocated (it was a
/// `vec![0; len + 2]`, an overflow panic at `u64::MAX` and an abort on an absurd allocation).
#[test]
fn an_absurd_length_is_refused() {
    assert_eq!(value_len("VA 18446744073709551615 c1 t2"), None);
    assert_eq!(value_len(&format!("VA {} c1", MAX_VALUE_LEN + 1)), None);
    assert_eq!(value_len("VA 12 c1"), Some(12));
    assert_eq!(value_len("VA"), None);
}
