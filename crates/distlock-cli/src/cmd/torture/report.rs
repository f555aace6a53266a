//! The checker's figures per fault, from every process's event log, and the verdict of each
//! cell; printed as a table or one JSON object.
//!
//! * holds: each worker's `acquired` … `releasing`, checked by the testkit's history checker
//!   for overlapping believed holders and tokens out of order (token regressions). A hold cut
//!   by a kill ends at its log's last event: shorter than the holder's belief, so it can hide an
//!   overlap but never invent one;
//! * stale writes: the fenced resource refused a write (a larger token had been written:
//!   rejected), or accepted one whose token equalled the largest it had accepted, which only a
//!   second holder of the same token can write (accepted: the token source failed);
//! * lost updates: increments written to the control counter minus its final value.

use std::collections::HashMap;

use distlock_testkit::history::{self, Hold};
use serde::Serialize;

use super::FaultKind;
use super::events::{Event, Injected};

/// One fault's row.
#[derive(Serialize, Debug)]
pub(super) struct Cell {
    fault: FaultKind,
    /// OK, FAIL, "fault not exercised" or "not applicable".
    verdict: &'static str,
    /// Why not applicable, or what failed.
    note: Option<String>,
    acquisitions: u64,
    faults_injected: u64,
    overlapping_holders: u64,
    stale_writes_accepted: u64,
    stale_writes_rejected: u64,
    token_regressions: u64,
    lost_updates: u64,
    lost_signals: u64,
    errors: u64,
    /// Kill: the longest time from a holder's death to the next acquisition by anyone.
    max_recovery_ms: Option<u64>,
}

impl Cell {
    /// A fault this store cannot take.
    pub(super) fn not_applicable(fault: FaultKind, why: &str) -> Cell {
        Cell {
            fault,
            verdict: "not applicable",
            note: Some(why.to_string()),
            acquisitions: 0,
            faults_injected: 0,
            overlapping_holders: 0,
            stale_writes_accepted: 0,
            stale_writes_rejected: 0,
            token_regressions: 0,
            lost_updates: 0,
            lost_signals: 0,
            errors: 0,
            max_recovery_ms: None,
        }
    }

    /// Checks one phase: `logs` (one per process start), the faults `injected`, the control
    /// counter's final value.
    pub(super) fn check(
        fault: FaultKind,
        logs: &[Vec<Event>],
        injected: &[Injected],
        counter: u64,
    ) -> Cell {
        let mut cell = Cell::not_applicable(fault, "");
        cell.note = None;
        cell.faults_injected = injected.len() as u64;
        let mut holds = Vec::new();
        // Holds whose release found the holding still there: the store's own grants. Token order
        // is judged on these only. A believed hold that was lost need not start, by the worker's
        // clock, in the order the store granted it: a worker stopped between `acquire` returning
        // and noting the time notes its start after its successor's (seen on SQLite under
        // `stop`: the older, smaller token "after" the newer one).
        let mut confirmed = Vec::new();
        let mut ending: HashMap<u32, Hold> = HashMap::new();
        let mut increments = 0u64;
        for log in logs {
            let last_ns = log.iter().map(event_time).max().unwrap_or(0);
            let mut open: HashMap<u32, (u64, u64)> = HashMap::new();
            for event in log {
                match *event {
                    Event::Acquired {
                        at_ns,
                        worker,
                        token,
                    } => {
                        cell.acquisitions += 1;
                        open.insert(worker, (at_ns, token));
                    }
                    Event::Releasing { at_ns, worker } => {
                        if let Some((start_ns, token)) = open.remove(&worker) {
                            let hold = Hold {
                                start_ns,
                                end_ns: at_ns,
                                token,
                            };
                            holds.push(hold);
                            ending.insert(worker, hold);
                        }
                    }
                    Event::Wrote {
                        token,
                        accepted,
                        highest_before,
                        ..
                    } => {
                        if !accepted {
                            cell.stale_writes_rejected += 1;
                        } else if highest_before == token && token > 0 {
                            cell.stale_writes_accepted += 1;
                        }
                    }
                    Event::Counted { .. } => increments += 1,
                    Event::Lost { .. } => cell.lost_signals += 1,
                    Event::Failed { .. } => cell.errors += 1,
                    Event::Released { worker, held, .. } => {
                        if let Some(hold) = ending.remove(&worker)
                            && held
                        {
                            confirmed.push(hold);
                        }
                    }
                }
            }
            // Holds the process never ended: it was killed holding.
            holds.extend(open.into_values().map(|(start_ns, token)| Hold {
                start_ns,
                end_ns: last_ns.max(start_ns),
                token,
            }));
        }
        let verdict = history::check(holds.iter().copied());
        cell.overlapping_holders = verdict.overlaps;
        cell.token_regressions = history::check(confirmed.iter().copied()).token_order_violations;
        cell.lost_updates = increments.saturating_sub(counter);
        if fault == FaultKind::Kill {
            cell.max_recovery_ms = injected
                .iter()
                .filter_map(|i| history::next_start_after(holds.iter().copied(), i.at_ns))
                .max()
                .map(|ns| ns / 1_000_000);
        }
        (cell.verdict, cell.note) = if cell.stale_writes_accepted > 0 || cell.token_regressions > 0
        {
            ("FAIL", Some(verdict.to_string()))
        } else if cell.faults_injected == 0 {
            ("fault not exercised", Some("no fault was injected".into()))
        } else if fault.expects_overlap() && cell.overlapping_holders == 0 && cell.lost_updates == 0
        {
            (
                "fault not exercised",
                Some("no overlap on the control counter or in the holds".into()),
            )
        } else {
            ("OK", None)
        };
        cell
    }
}

fn event_time(e: &Event) -> u64 {
    match *e {
        Event::Acquired { at_ns, .. }
        | Event::Wrote { at_ns, .. }
        | Event::Counted { at_ns, .. }
        | Event::Releasing { at_ns, .. }
        | Event::Released { at_ns, .. }
        | Event::Lost { at_ns, .. }
        | Event::Failed { at_ns, .. } => at_ns,
    }
}

/// The whole run.
#[derive(Serialize, Debug)]
pub(super) struct Report {
    pub(super) backend: String,
    /// Redacted.
    pub(super) url: String,
    pub(super) processes: usize,
    pub(super) workers: usize,
    pub(super) lease_ms: u64,
    pub(super) seconds_per_fault: f64,
    pub(super) cells: Vec<Cell>,
}

impl Report {
    /// Some cell failed.
    pub(super) fn failed(&self) -> bool {
        self.cells.iter().any(|c| c.verdict == "FAIL")
    }

    /// A header line, one row per fault, then the notes.
    pub(super) fn print_table(&self) {
        println!(
            "{} ({}): {} workers over {} processes, lease {} ms, {:.0} s per fault",
            self.backend,
            self.url,
            self.workers,
            self.processes,
            self.lease_ms,
            self.seconds_per_fault
        );
        let header = [
            "fault",
            "acquired",
            "injected",
            "overlaps",
            "stale ok",
            "stale refused",
            "token regr",
            "lost upd",
            "lost sig",
            "errors",
            "recovery ms",
            "verdict",
        ];
        let rows: Vec<[String; 12]> = self
            .cells
            .iter()
            .map(|c| {
                [
                    c.fault.name().to_string(),
                    c.acquisitions.to_string(),
                    c.faults_injected.to_string(),
                    c.overlapping_holders.to_string(),
                    c.stale_writes_accepted.to_string(),
                    c.stale_writes_rejected.to_string(),
                    c.token_regressions.to_string(),
                    c.lost_updates.to_string(),
                    c.lost_signals.to_string(),
                    c.errors.to_string(),
                    c.max_recovery_ms.map_or("-".to_string(), |ms| {
                        format!("{ms} (lease {})", self.lease_ms)
                    }),
                    c.verdict.to_string(),
                ]
            })
            .collect();
        let widths: Vec<usize> = (0..header.len())
            .map(|i| {
                rows.iter()
                    .map(|r| r[i].len())
                    .chain([header[i].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: Vec<&str>| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            println!("{}", padded.join("  ").trim_end());
        };
        line(header.to_vec());
        for row in &rows {
            line(row.iter().map(String::as_str).collect());
        }
        for c in &self.cells {
            if let Some(note) = &c.note {
                println!("{}: {note}", c.fault.name());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(worker: u32, token: u64, start: u64, end: u64, highest_before: u64) -> Vec<Event> {
        vec![
            Event::Acquired {
                at_ns: start,
                worker,
                token,
            },
            Event::Wrote {
                at_ns: start + 1,
                worker,
                token,
                accepted: token >= highest_before,
                highest_before,
                lost_known: false,
            },
            Event::Releasing { at_ns: end, worker },
            Event::Released {
                at_ns: end + 1,
                worker,
                held: true,
            },
        ]
    }

    const ONE: [Injected; 1] = [Injected {
        at_ns: 5,
        until_ns: 6,
        process: Some(0),
    }];

    #[test]
    fn a_second_holder_of_the_same_token_fails_the_cell() {
        let logs = [hold(0, 7, 0, 10, 0), hold(1, 7, 20, 30, 7)];
        let cell = Cell::check(FaultKind::Kill, &logs, &ONE, 0);
        assert_eq!(cell.stale_writes_accepted, 1);
        assert_eq!(cell.token_regressions, 1);
        assert_eq!(cell.verdict, "FAIL");
    }

    #[test]
    fn a_lost_hold_noted_late_is_no_token_regression() {
        // Worker 0 got token 5, was stopped before noting the time, and noted its start after
        // worker 1's hold with token 9 began; its release found the holding gone.
        let mut lost = hold(0, 5, 15, 40, 0);
        lost.retain(|e| !matches!(e, Event::Released { .. }));
        lost.push(Event::Released {
            at_ns: 41,
            worker: 0,
            held: false,
        });
        let logs = [lost, hold(1, 9, 10, 30, 0)];
        let cell = Cell::check(FaultKind::Stop, &logs, &ONE, 0);
        assert!(cell.overlapping_holders > 0, "{cell:?}");
        assert_eq!(cell.token_regressions, 0, "{cell:?}");
    }

    #[test]
    fn a_refused_stale_write_in_an_overlap_is_a_stop_exercised() {
        // Worker 0, paused from 0 to 100, writes after worker 1 held and wrote token 2.
        let logs = [hold(0, 1, 0, 100, 2), hold(1, 2, 20, 30, 1)];
        let cell = Cell::check(FaultKind::Stop, &logs, &ONE, 0);
        assert_eq!(cell.stale_writes_rejected, 1);
        assert!(cell.overlapping_holders > 0);
        assert_eq!(cell.verdict, "OK", "{cell:?}");
    }

    #[test]
    fn a_stop_without_any_overlap_was_not_exercised() {
        let logs = [hold(0, 1, 0, 10, 0), hold(1, 2, 20, 30, 1)];
        let cell = Cell::check(FaultKind::Stop, &logs, &ONE, 0);
        assert_eq!(cell.verdict, "fault not exercised");
        let kill = Cell::check(FaultKind::Kill, &logs, &ONE, 0);
        assert_eq!(kill.verdict, "OK");
        assert_eq!(kill.max_recovery_ms, Some(0), "15 ns rounds down");
        assert_eq!(
            Cell::check(FaultKind::Kill, &logs, &[], 0).verdict,
            "fault not exercised"
        );
    }
}
