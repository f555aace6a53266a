//! Election records and count-down latches in the SQLite file: the steps of
//! [`Elections::elect_write`](crate::backend::Elections::elect_write) and the latch methods, run by
//! the writer thread like any other op (each atomic in its transaction). A step that changes
//! what watchers wait for (an election entry appended, a latch reaching 0) bumps a release
//! counter of the sidecar file after the commit, which inotify reports to other processes.

use rusqlite::{Connection, OptionalExtension, params};

use super::clock;
use super::sidecar::slot_of;
use crate::backend::{ELECTION_LOG_KEEP, ElectionEntry};
use crate::types::FencingToken;

/// One election or latch step.
#[derive(Debug)]
pub(super) enum SyncOp {
    ElectWrite {
        name: String,
        term: i64,
        value: Option<String>,
        ttl_ms: i64,
    },
    ElectCurrent {
        name: String,
    },
    ElectLog {
        name: String,
        after: Option<i64>,
    },
    LatchSet {
        name: String,
        count: i64,
    },
    LatchDown {
        name: String,
    },
    LatchCount {
        name: String,
    },
}

/// What a [`SyncOp`] answered; `notify` when its watchers must be told after the commit.
#[derive(Debug)]
pub(super) enum SyncAnswer {
    Written { accepted: bool, notify: bool },
    Entries(Vec<ElectionEntry>),
    Count { count: u64, notify: bool },
}

/// The release counter an election's watchers listen on (a name no lock has: the hash input
/// carries a control character, which lock names cannot).
pub(super) fn election_slot(name: &str) -> usize {
    slot_of(&format!("\u{1}election\u{1}{name}"))
}

/// The release counter a latch's waiters listen on.
pub(super) fn latch_slot(name: &str) -> usize {
    slot_of(&format!("\u{1}latch\u{1}{name}"))
}

impl SyncOp {
    pub(super) fn name(&self) -> &str {
        match self {
            SyncOp::ElectWrite { name, .. }
            | SyncOp::ElectCurrent { name }
            | SyncOp::ElectLog { name, .. }
            | SyncOp::LatchSet { name, .. }
            | SyncOp::LatchDown { name }
            | SyncOp::LatchCount { name } => name,
        }
    }

    /// The counter to bump after the commit, if `answer` changed what watchers wait for.
    pub(super) fn notifies(&self, answer: &SyncAnswer) -> Option<usize> {
        match (self, answer) {
            (SyncOp::ElectWrite { name, .. }, SyncAnswer::Written { notify: true, .. }) => {
                Some(election_slot(name))
            }
            (SyncOp::LatchDown { name }, SyncAnswer::Count { notify: true, .. }) => {
                Some(latch_slot(name))
            }
            _ => None,
        }
    }
}

fn entry(seq: i64, term: i64, value: Option<String>) -> ElectionEntry {
    ElectionEntry::new(seq as u64, FencingToken(term as u64), value)
}

/// Runs `op` inside the writer's transaction.
pub(super) fn apply(conn: &Connection, boot_id: &str, op: &SyncOp) -> rusqlite::Result<SyncAnswer> {
    let now = clock::boottime_ms();
    match op {
        SyncOp::ElectWrite {
            name,
            term,
            value,
            ttl_ms,
        } => {
            let row = conn
                .prepare_cached(include_str!("sql/elect_select.sql"))?
                .query_row(params![name], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, Option<String>>(2)?,
                    ))
                })
                .optional()?;
            // A resigned record lapses at once.
            let expires = if value.is_some() { now + ttl_ms } else { 0 };
            let (seq, append) = match row {
                Some((_, max_term, _)) if *term < max_term => {
                    return Ok(SyncAnswer::Written {
                        accepted: false,
                        notify: false,
                    });
                }
                Some((seq, max_term, old)) if *term == max_term && old == *value => (seq, false),
                Some((seq, ..)) => (seq + 1, true),
                None => (1, true),
            };
            conn.prepare_cached(include_str!("sql/elect_upsert.sql"))?
                .execute(params![name, seq, term, value, boot_id, expires])?;
            if append {
                conn.prepare_cached(include_str!("sql/elect_append.sql"))?
                    .execute(params![name, seq, term, value])?;
                conn.prepare_cached(include_str!("sql/elect_trim.sql"))?
                    .execute(params![name, seq - ELECTION_LOG_KEEP as i64])?;
            }
            Ok(SyncAnswer::Written {
                accepted: true,
                notify: append,
            })
        }
        SyncOp::ElectCurrent { name } => {
            let row = conn
                .prepare_cached(include_str!("sql/elect_select.sql"))?
                .query_row(params![name], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, Option<String>>(2)?,
                        row.get::<_, String>(3)? == boot_id,
                        row.get::<_, i64>(4)?,
                    ))
                })
                .optional()?;
            Ok(SyncAnswer::Entries(
                row.filter(|(_, _, value, this_boot, expires)| {
                    value.is_some() && *this_boot && *expires > now
                })
                .map(|(seq, term, value, ..)| entry(seq, term, value))
                .into_iter()
                .collect(),
            ))
        }
        SyncOp::ElectLog { name, after } => {
            let entries = match after {
                None => conn
                    .prepare_cached(include_str!("sql/elect_select.sql"))?
                    .query_row(params![name], |row| {
                        Ok(entry(row.get(0)?, row.get(1)?, row.get(2)?))
                    })
                    .optional()?
                    .into_iter()
                    .collect(),
                Some(after) => conn
                    .prepare_cached(include_str!("sql/elect_log.sql"))?
                    .query_map(params![name, after], |row| {
                        Ok(entry(row.get(0)?, row.get(1)?, row.get(2)?))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?,
            };
            Ok(SyncAnswer::Entries(entries))
        }
        SyncOp::LatchSet { name, count } => {
            let set = conn
                .prepare_cached(include_str!("sql/latch_set.sql"))?
                .execute(params![name, count])?;
            Ok(SyncAnswer::Written {
                accepted: set == 1,
                notify: false,
            })
        }
        SyncOp::LatchDown { name } => {
            let after = conn
                .prepare_cached(include_str!("sql/latch_down.sql"))?
                .query_row(params![name], |row| row.get::<_, i64>(0))
                .optional()?;
            Ok(SyncAnswer::Count {
                count: after.unwrap_or(0).max(0) as u64,
                notify: after == Some(0),
            })
        }
        SyncOp::LatchCount { name } => {
            let count = conn
                .prepare_cached(include_str!("sql/latch_count.sql"))?
                .query_row(params![name], |row| row.get::<_, i64>(0))
                .optional()?;
            Ok(SyncAnswer::Count {
                count: count.unwrap_or(0).max(0) as u64,
                notify: false,
            })
        }
    }
}
