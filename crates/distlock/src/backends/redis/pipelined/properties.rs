//! Property tests of the reply reader: any reply Redis can send is measured whole and decoded as
//! redis-rs parses it, however the socket splits it; no input makes it panic.

use proptest::prelude::*;
use redis::Value;

use super::{MAX_NESTING, decode, frame_len};

/// The replies distlock's commands get: simple strings, integers, bulk strings (or nil) and
/// arrays of them, nested a few deep.
fn reply() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Okay),
        "[a-zA-Z0-9 _:.-]{0,20}"
            .prop_filter("+OK is Value::Okay", |s| s != "OK")
            .prop_map(Value::SimpleString),
        any::<i64>().prop_map(Value::Int),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Value::BulkString),
        Just(Value::Nil),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        proptest::collection::vec(inner, 0..4).prop_map(Value::Array)
    })
}

/// `value` as the server writes it (RESP2).
fn encode(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Okay => out.extend_from_slice(b"+OK\r\n"),
        Value::SimpleString(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
        Value::Int(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
        Value::Nil => out.extend_from_slice(b"$-1\r\n"),
        Value::BulkString(bytes) => {
            out.extend_from_slice(format!("${}\r\n", bytes.len()).as_bytes());
            out.extend_from_slice(bytes);
            out.extend_from_slice(b"\r\n");
        }
        Value::Array(items) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for item in items {
                encode(item, out);
            }
        }
        other => unreachable!("not generated: {other:?}"),
    }
}

proptest! {
    #[test]
    fn a_whole_reply_is_measured_and_decoded_as_redis_rs_parses_it(
        value in reply(),
        after in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let mut frame = Vec::new();
        encode(&value, &mut frame);
        let len = frame.len();
        // What follows in the buffer (the next reply, or its start) does not change the length.
        let mut buffered = frame.clone();
        buffered.extend_from_slice(&after);
        prop_assert_eq!(frame_len(&buffered), Ok(Some(len)));
        let parsed = redis::parse_redis_value(&frame).unwrap();
        prop_assert_eq!(decode(&frame), Some((parsed, len)));
    }

    #[test]
    fn a_reply_split_anywhere_is_incomplete_until_its_last_byte(value in reply()) {
        let mut frame = Vec::new();
        encode(&value, &mut frame);
        for cut in 0..frame.len() {
            prop_assert_eq!(frame_len(&frame[..cut]), Ok(None), "cut at {}", cut);
        }
    }

    #[test]
    fn no_input_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = frame_len(&bytes);
        let _ = decode(&bytes);
    }

    #[test]
    fn no_reply_shaped_input_panics(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("*".to_string()), Just("$".to_string()), Just(":".to_string()),
                Just("+".to_string()), Just("\r\n".to_string()), Just("-1".to_string()),
                Just("9223372036854775807".to_string()), Just("0".to_string()),
                Just("3".to_string()), Just("abc".to_string()),
            ],
            0..40,
        )
    ) {
        let bytes = parts.concat().into_bytes();
        if let Ok(Some(len)) = frame_len(&bytes) {
            prop_assert!(len <= bytes.len());
            let _ = decode(&bytes[..len]);
        }
    }
}

/// A stream of `*1\r\n` nested past any reply distlock gets is refused, not a stack overflow.
#[test]
fn deep_nesting_is_refused() {
    let deep = "*1\r\n".repeat(100_000) + ":1\r\n";
    assert!(frame_len(deep.as_bytes()).is_err());
    let fits = "*1\r\n".repeat(MAX_NESTING) + ":1\r\n";
    assert_eq!(frame_len(fits.as_bytes()), Ok(Some(fits.len())));
}
