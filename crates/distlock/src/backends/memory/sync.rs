//! Election records and count-down latches of one in-memory store: each step atomic under the
//! store's mutex, as the locks' are (`locks.rs`). A record is live until a time of tokio's
//! clock, so paused time moves it as it moves the leases.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::locks::notices;
use crate::backend::{ELECTION_LOG_KEEP, ElectionEntry, Wakeups};
use crate::backends::client_rules::records::{self, Step};
use crate::types::{FencingToken, LockName};

/// One election: its log and the largest term written.
struct Record {
    /// The last entries, oldest first (at most [`ELECTION_LOG_KEEP`]).
    log: VecDeque<ElectionEntry>,
    max_term: u64,
    /// Until when the latest entry is live.
    live_until: Instant,
    changed: watch::Sender<()>,
}

impl Record {
    fn new() -> Self {
        Record {
            log: VecDeque::new(),
            max_term: 0,
            live_until: Instant::now(),
            changed: watch::Sender::new(()),
        }
    }

    fn latest(&self) -> Option<&ElectionEntry> {
        self.log.back()
    }
}

/// The elections of one store.
#[derive(Default)]
pub(super) struct Elections(Mutex<HashMap<String, Record>>);

impl Elections {
    fn state(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A write fenced by its term, decided by the rule the SQL stores share.
    pub(super) fn write(
        &self,
        election: &LockName,
        term: FencingToken,
        value: Option<&str>,
        ttl: Duration,
    ) -> bool {
        let mut state = self.state();
        let record = state
            .entry(election.as_str().to_string())
            .or_insert_with(Record::new);
        let latest = record.latest();
        let step = records::step(
            latest.map_or(0, |e| e.seq as i64),
            record.max_term as i64,
            latest.and_then(|e| e.value.as_deref()),
            term.get() as i64,
            value,
        );
        match step {
            Step::Refuse => return false,
            Step::Refresh => {}
            Step::Append { seq } => {
                record.log.push_back(ElectionEntry::new(
                    seq as u64,
                    term,
                    value.map(str::to_string),
                ));
                while record.log.len() as u64 > ELECTION_LOG_KEEP {
                    record.log.pop_front();
                }
                record.max_term = term.get();
                record.changed.send_replace(());
            }
        }
        record.live_until = Instant::now() + ttl;
        true
    }

    /// The latest entry, if it names a leader and is live.
    pub(super) fn current(&self, election: &LockName) -> Option<ElectionEntry> {
        let state = self.state();
        let record = state.get(election.as_str())?;
        let latest = record.latest()?;
        (latest.value.is_some() && record.live_until > Instant::now()).then(|| latest.clone())
    }

    /// The entries after `after`; with `None`, the latest.
    pub(super) fn log(&self, election: &LockName, after: Option<u64>) -> Vec<ElectionEntry> {
        let state = self.state();
        let Some(record) = state.get(election.as_str()) else {
            return Vec::new();
        };
        match after {
            None => record.latest().cloned().into_iter().collect(),
            Some(after) => record
                .log
                .iter()
                .filter(|e| e.seq > after)
                .cloned()
                .collect(),
        }
    }

    pub(super) fn watch(&self, election: &LockName) -> Wakeups {
        let mut state = self.state();
        let record = state
            .entry(election.as_str().to_string())
            .or_insert_with(Record::new);
        notices(record.changed.subscribe())
    }
}

/// One latch.
struct Latch {
    count: u64,
    changed: watch::Sender<()>,
}

/// The count-down latches of one store.
#[derive(Default)]
pub(super) struct Latches(Mutex<HashMap<String, Latch>>);

impl Latches {
    fn state(&self) -> std::sync::MutexGuard<'_, HashMap<String, Latch>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn entry<'a>(state: &'a mut HashMap<String, Latch>, latch: &LockName) -> &'a mut Latch {
        state
            .entry(latch.as_str().to_string())
            .or_insert_with(|| Latch {
                count: 0,
                changed: watch::Sender::new(()),
            })
    }

    /// Sets the count if none is running.
    pub(super) fn set(&self, latch: &LockName, count: u64) -> bool {
        let mut state = self.state();
        let latch = Self::entry(&mut state, latch);
        if latch.count != 0 {
            return false;
        }
        latch.count = count;
        true
    }

    /// Counts down by one, never below 0; the step that reaches 0 wakes the waiters.
    pub(super) fn count_down(&self, latch: &LockName) -> u64 {
        let mut state = self.state();
        let latch = Self::entry(&mut state, latch);
        if latch.count > 0 {
            latch.count -= 1;
            if latch.count == 0 {
                latch.changed.send_replace(());
            }
        }
        latch.count
    }

    pub(super) fn count(&self, latch: &LockName) -> u64 {
        self.state().get(latch.as_str()).map_or(0, |l| l.count)
    }

    pub(super) fn watch(&self, latch: &LockName) -> Wakeups {
        notices(Self::entry(&mut self.state(), latch).changed.subscribe())
    }
}
