//! Election entries and latch counts as a key's bytes, for the stores that keep them so
//! (ZooKeeper nodes, etcd keys): one format, written and read the same way by both.
//!
//! An entry is `seq:term:has:value` (`has` is 1 when there is a value, which may itself contain
//! `:`); a count is its decimal digits.
//!
//! A contender's entry (a lock's sequential node, a lock's key) records who put it:
//! `owner\npermits\nunix_ms\nholder` — the owner token where the store needs it to recognise its
//! own entry (etcd; empty on ZooKeeper, whose nodes anyone may read: the token is a secret),
//! the semaphore's permit count (0 for other flavours: a status needs it to tell a semaphore's
//! holders from its waiters), when the entry was put, and [`Holder::this_process_record`] (last:
//! it has no newline). Entries of other writers read as far as they go: an older distlock's etcd
//! value is the bare owner token, `etcdctl lock` writes nothing, Curator the client's address.

use crate::backend::ElectionEntry;
use crate::error::{Error, ErrorKind, Result};
use crate::status::Holder;
use crate::types::{FencingToken, LockName};

/// What a contender's entry says about who put it (see the module docs).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Contender {
    /// The owner token; for an entry of another writer, its whole text.
    pub(crate) owner: String,
    pub(crate) permits: Option<u32>,
    pub(crate) since_ms: Option<i64>,
    pub(crate) holder: Option<Holder>,
}

/// The entry this process puts for a contender of `owner` (`""` where the store must not keep
/// it), asking for `permits` (0: not a semaphore), now.
pub(crate) fn encode_contender(owner: &str, permits: u32) -> String {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    format!(
        "{owner}\n{permits}\n{now_ms}\n{}",
        Holder::this_process_record()
    )
}

/// Reads a contender's entry; never fails (an entry of another writer has only an owner).
pub(crate) fn decode_contender(data: &[u8]) -> Contender {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.splitn(4, '\n');
    let owner = lines.next().unwrap_or_default().to_string();
    let permits = lines.next().and_then(|p| p.parse().ok());
    let since_ms = lines.next().and_then(|t| t.parse().ok());
    let holder = lines.next().and_then(Holder::from_record);
    Contender {
        owner,
        permits: permits.filter(|p| *p > 0),
        since_ms,
        holder,
    }
}

/// Whether a contender's entry was put for `owner`.
// Only etcd reads contender records back by owner.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub(crate) fn contender_of(data: &[u8], owner: &str) -> bool {
    data.strip_prefix(owner.as_bytes())
        .is_some_and(|rest| rest.first() == Some(&b'\n'))
}

pub(crate) fn encode_entry(seq: u64, term: FencingToken, value: Option<&str>) -> String {
    match value {
        Some(v) => format!("{seq}:{}:1:{v}", term.get()),
        None => format!("{seq}:{}:0:", term.get()),
    }
}

pub(crate) fn decode_entry(data: &[u8], backend: &'static str) -> Result<ElectionEntry> {
    let bad = || {
        Error::new(
            ErrorKind::Backend,
            "an election record that is not seq:term:has:value",
        )
        .with_backend(backend)
    };
    let text = std::str::from_utf8(data).map_err(|_| bad())?;
    let mut parts = text.splitn(4, ':');
    let seq = parts.next().and_then(|s| s.parse::<u64>().ok());
    let term = parts.next().and_then(|t| t.parse::<u64>().ok());
    let has = parts.next();
    match (seq, term, has) {
        (Some(seq), Some(term), Some(has)) => Ok(ElectionEntry::new(
            seq,
            FencingToken(term),
            (has == "1").then(|| parts.next().unwrap_or("").to_string()),
        )),
        _ => Err(bad()),
    }
}

/// An election's live leader: its latest entry, if it has a value and the writer's liveness
/// marker (an etcd key under its lease, a ZooKeeper ephemeral node) names that very entry by
/// `alive_seq` — a marker left by an earlier entry, or none, means the leader is gone.
pub(crate) fn live_leader(
    latest: Option<ElectionEntry>,
    alive_seq: Option<u64>,
) -> Option<ElectionEntry> {
    latest.filter(|entry| entry.value.is_some() && alive_seq == Some(entry.seq))
}

pub(crate) fn decode_count(data: &[u8], backend: &'static str) -> Result<u64> {
    std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Backend,
                "a latch whose stored count is not a number",
            )
            .with_backend(backend)
        })
}

/// A latch step that lost its compare-and-set race `races` times in a row.
pub(crate) fn latch_raced(latch: &LockName, races: u32, backend: &'static str) -> Error {
    Error::new(
        ErrorKind::Backend,
        format!("latch {latch:?}: the count changed under {races} steps in a row"),
    )
    .with_backend(backend)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_with_colons_in_values() {
        for value in [None, Some(""), Some("node-a:8080"), Some("a:b:c")] {
            let text = encode_entry(7, FencingToken(1_700_000_000_000_123), value);
            let entry = decode_entry(text.as_bytes(), "zk").unwrap();
            assert_eq!(
                entry,
                ElectionEntry::new(
                    7,
                    FencingToken(1_700_000_000_000_123),
                    value.map(str::to_string)
                )
            );
        }
        assert!(decode_entry(b"7:x:1:v", "zk").is_err());
        assert_eq!(decode_count(b"42", "etcd").unwrap(), 42);
        assert!(decode_count(b"-1", "etcd").is_err());
    }

    #[test]
    fn contender_entries_round_trip_and_others_read_as_far_as_they_go() {
        let entry = encode_contender("0a1b", 3);
        let read = decode_contender(entry.as_bytes());
        assert_eq!(read.owner, "0a1b");
        assert_eq!(read.permits, Some(3));
        assert!(read.since_ms.is_some_and(|t| t > 1_700_000_000_000));
        assert_eq!(read.holder.as_ref(), Some(Holder::this_process()));
        assert!(contender_of(entry.as_bytes(), "0a1b"));
        assert!(!contender_of(entry.as_bytes(), "0a1"));
        assert!(!contender_of(b"0a1b", "0a1b"));
        assert_eq!(
            decode_contender(encode_contender("", 0).as_bytes()).permits,
            None
        );
        for other in [&b""[..], b"0a1b", b"10.0.0.7", b"\xff\n\n\n"] {
            let read = decode_contender(other);
            assert_eq!(
                (read.permits, read.since_ms, read.holder),
                (None, None, None)
            );
        }
    }
}
