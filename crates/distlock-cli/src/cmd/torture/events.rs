//! The event log each worker process writes (one JSON object a line, one file per process
//! start), and the parent's record of the faults it injected. Times are CLOCK_MONOTONIC ns,
//! one clock for every process on the machine.
//!
//! Each event is written with its own `write(2)` as it happens, so a process killed with
//! SIGKILL leaves every event up to its death, and a stopped one shows exactly where it stands.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// One thing a worker did or saw.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(super) enum Event {
    /// `acquire` returned: the worker believes it holds the lock from here.
    Acquired { at_ns: u64, worker: u32, token: u64 },
    /// The fenced resource answered a write with the hold's token. `lost_known`: the guard
    /// already said the lease was lost (the workload writes anyway, to test the fence).
    Wrote {
        at_ns: u64,
        worker: u32,
        token: u64,
        accepted: bool,
        highest_before: u64,
        lost_known: bool,
    },
    /// The control counter was read as `read` and written as `read + 1`, with no fence.
    Counted { at_ns: u64, worker: u32, read: u64 },
    /// The worker is about to call `release`: its believed hold ends here. `valid_until_ns`:
    /// when its lease ended (or ends) by its own clock, as the guard says then
    /// ([`distlock::Guard::valid_until`]); `None` for a holding with no end by time.
    Releasing {
        at_ns: u64,
        worker: u32,
        #[serde(default)]
        valid_until_ns: Option<u64>,
    },
    /// `release` answered: `held` false if the holding had been lost.
    Released { at_ns: u64, worker: u32, held: bool },
    /// The guard's lost signal fired during the hold.
    Lost { at_ns: u64, worker: u32, token: u64 },
    /// An acquire or release failed (the store unreachable, a timeout).
    Failed {
        at_ns: u64,
        worker: u32,
        message: String,
    },
}

/// A worker process's log file, shared by its workers.
pub(super) struct EventLog(Mutex<File>);

impl EventLog {
    pub(super) fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(EventLog(Mutex::new(file)))
    }

    /// Appends `event` with one write, so a kill never leaves half a line before a whole one.
    pub(super) fn write(&self, event: &Event) {
        let mut line = serde_json::to_string(event).expect("events serialize");
        line.push('\n');
        let mut file = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // A full disk loses events; the checker then sees fewer, never false ones.
        let _ = file.write_all(line.as_bytes());
    }
}

/// Reads a log; a last line cut short (a process killed mid-write) is skipped.
pub(super) fn read(path: &Path) -> Result<Vec<Event>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect())
}

/// Whether some worker of a log holds now: an `Acquired` not yet followed by its `Releasing`.
pub(super) fn holding(events: &[Event]) -> bool {
    let mut held = std::collections::HashSet::new();
    for e in events {
        match e {
            Event::Acquired { worker, .. } => {
                held.insert(*worker);
            }
            Event::Releasing { worker, .. } => {
                held.remove(worker);
            }
            _ => {}
        }
    }
    !held.is_empty()
}

/// The events of one start of a worker process, and which process it was (its number in the
/// phase: a process killed and started again keeps its number).
pub(super) struct ProcessLog {
    pub(super) process: usize,
    pub(super) events: Vec<Event>,
}

/// A fault the parent injected.
#[derive(Serialize, Debug, Clone, Copy)]
pub(super) struct Injected {
    /// When it began: for a fault on a holder, when it was sent SIGSTOP (it renewed nothing
    /// after that; for kill, it did nothing more).
    pub(super) at_ns: u64,
    /// When it ended (for kill, when the process was killed).
    pub(super) until_ns: u64,
    /// The process hit, for kill and stop.
    pub(super) process: Option<usize>,
}
