//! Election records: the few steps leader election needs beyond the lock. The election itself
//! is written once over the lock ([`crate::election`]): leadership is holding the election's
//! lock, and the term is that holding's fencing token. A store supplies a record fenced by the
//! term and a short log of its changes, which observers read.
//!
//! A store that can keep them implements [`Elections`] and answers it from
//! [`Backend::elections`](super::Backend::elections); one that cannot answers `None`, and every
//! election call then answers [`crate::ErrorKind::Unsupported`].

use std::time::Duration;

use async_trait::async_trait;

use super::Wakeups;
use crate::error::Result;
use crate::types::{FencingToken, LockName};

/// One entry of an election's log in the store: a leader's value in its term, or the end of a
/// term (the leader resigned). Entries of one election are numbered by `seq` in the order they
/// were written, and their terms never decrease in that order.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionEntry {
    /// Position in the election's log: each entry's is larger than the one before.
    pub seq: u64,
    /// The term: the fencing token of the leader's hold of the election's lock.
    pub term: FencingToken,
    /// What the leader proclaimed; `None` once it resigned.
    pub value: Option<String>,
}

impl ElectionEntry {
    /// An entry (for backends building their answers).
    pub fn new(seq: u64, term: FencingToken, value: Option<String>) -> Self {
        ElectionEntry { seq, term, value }
    }
}

/// One fenced write of an election's record: see [`Elections::elect_write`].
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ElectionWrite<'a> {
    /// The election's record (its name).
    pub election: &'a LockName,
    /// The writer's term: refused below the largest term ever written.
    pub term: FencingToken,
    /// The leader's value; `None` ends the term.
    pub value: Option<&'a str>,
    /// How long the record stays live after this write, by the store's clock.
    pub ttl: Duration,
}

impl<'a> ElectionWrite<'a> {
    /// A write of `value` in `term`, live for `ttl`.
    pub fn new(
        election: &'a LockName,
        term: FencingToken,
        value: Option<&'a str>,
        ttl: Duration,
    ) -> Self {
        ElectionWrite {
            election,
            term,
            value,
            ttl,
        }
    }
}

/// How many entries of an election's log a store keeps (older ones are trimmed): an observer
/// further behind than this misses the oldest of the terms it has not read.
pub const ELECTION_LOG_KEEP: u64 = 1000;

/// An election's record and log in the store.
///
/// # Contract
///
/// * A write is fenced by its term: refused, changing nothing, below the largest term ever
///   written for the election, so a deposed leader never overwrites a newer one.
/// * The log's entries are numbered in the order they were written and keep the last
///   [`ELECTION_LOG_KEEP`]; a live record lapses `ttl` after its last write, by the store's
///   clock.
#[async_trait]
pub trait Elections: Send + Sync {
    /// Writes an election's record, fenced by its term: only if `term` is at least the largest
    /// term ever written for the `election` (so a deposed leader can never overwrite a newer one).
    /// If `(term, value)` differs from the latest entry, a new entry is appended to the log
    /// (keeping the last [`ELECTION_LOG_KEEP`]) and watchers are notified; in any case the
    /// record is live for `ttl` from now by the store's clock (`value: None` ends the term: no
    /// live leader). `Ok(false)`, with nothing changed, if a larger term was written.
    async fn elect_write(&self, write: ElectionWrite<'_>) -> Result<bool>;

    /// The live leader of `election`: the latest entry, if it has a value and its `ttl` has not
    /// run out by the store's clock.
    async fn elect_current(&self, election: &LockName) -> Result<Option<ElectionEntry>>;

    /// The entries after `after` (by `seq`, oldest first); with `None`, only the latest entry
    /// (where an observer starts). Expired or not.
    async fn elect_log(
        &self,
        election: &LockName,
        after: Option<u64>,
    ) -> Result<Vec<ElectionEntry>>;

    /// Starts listening for "the election's log may have grown". The default never yields: the
    /// core then polls (bounded, jittered), as it does for a store that does not notify.
    async fn watch_election(&self, _election: &LockName) -> Result<Wakeups> {
        Ok(Box::pin(futures_util::stream::pending()))
    }
}
