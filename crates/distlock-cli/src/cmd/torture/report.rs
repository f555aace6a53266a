//! The checker's figures per fault, from every process's event log, and the verdict of each
//! cell; printed as a table or one JSON object.
//!
//! * holds: each worker's `acquired` … `releasing`, checked by the testkit's history checker
//!   for overlapping believed holders and tokens out of order (token regressions). A hold cut
//!   by a kill ends at its log's last event: shorter than the holder's belief, so it can hide an
//!   overlap but never invent one;
//! * unexplained overlaps: each overlap is put down to the fault only where the cell's rule
//!   ([`Rule`]: what the store promises under the fault) allows it — the overlapped hold is the
//!   one the fault caught, or one of a process it cut off, and the overlapping hold began once
//!   the fault had. Every other overlap, and any with no fault injected, is the lock's own
//!   failure;
//! * stale writes: the fenced resource refused a write (a larger token had been written:
//!   rejected), or accepted one whose token equalled the largest it had accepted, which only a
//!   second holder of the same token can write (accepted: the token source failed);
//! * lost updates: increments written to the control counter minus its final value;
//! * free after: once every worker process has ended, the parent takes the lock itself: a lock
//!   still held past every lease and session was left behind by the run;
//! * availability: acquisitions per second while a fault was on, against the rate while none
//!   was (a minority of a cluster cut off must not stop the lock);
//! * lost-signal lag: for each hold whose lost signal fired, how long after the next holder's
//!   acquisition it fired (0 when before): how long a holder went on believing it held.

use std::collections::HashMap;

use distlock_harness::history::{self, Hold};
use serde::Serialize;

use super::events::{Event, Injected, ProcessLog};
use super::{Allowed, FaultKind, Overlaps};

/// What a phase is judged by besides its logs.
pub(super) struct Rule {
    pub(super) fault: FaultKind,
    /// Holds are leases (else sessions).
    pub(super) leases: bool,
    /// The overlaps the fault may explain on this store.
    pub(super) allowed: Allowed,
    /// The processes the fault cut off from the store: those behind the proxies, or for a
    /// partition every process (any may reach the store through a member cut off).
    pub(super) cut_off: Vec<usize>,
}

/// A hold and the worker process (its number in the phase) that held it.
#[derive(Clone, Copy, Debug)]
struct Held {
    hold: Hold,
    process: usize,
}

/// What the parent found after the workers ended: how long until it could take the lock
/// (`None`: not within `waited`), and how many holdings and waiters the store listed under
/// the lock's name once it had released it.
pub(super) struct Teardown {
    pub(super) free_after: Option<std::time::Duration>,
    pub(super) waited: std::time::Duration,
    pub(super) left_in_store: Option<u64>,
}

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
    /// Overlapping holds that no injected fault explains under `overlaps_allowed`: each one
    /// fails the cell.
    unexplained_overlaps: u64,
    /// Overlapping holds where the store handed the lock on only once the earlier holder's
    /// lease had ended by that holder's own clock, and the holder went on past it (a pause
    /// between its last check and its last step, which only the fence guards against): the
    /// store kept its promise, so these never fail the cell, whatever the fault.
    overlaps_past_lease: u64,
    /// Which overlaps the fault may explain on this store ("none": the store promises
    /// exclusion under it), and why (`None` when not applicable).
    overlaps_allowed: Option<Overlaps>,
    overlaps_allowed_why: Option<&'static str>,
    stale_writes_accepted: u64,
    stale_writes_rejected: u64,
    token_regressions: u64,
    lost_updates: u64,
    lost_signals: u64,
    errors: u64,
    /// Kill: the longest time from a holder's death to the next acquisition by anyone.
    max_recovery_ms: Option<u64>,
    /// Acquisitions while a fault was on.
    acquired_during_faults: u64,
    /// The acquisition rate while a fault was on, in percent of the rate while none was.
    availability_pct: Option<u64>,
    /// The longest a lost signal fired after the next holder had the lock (0: every holder
    /// was told before anyone else got it).
    max_lost_lag_ms: Option<u64>,
    /// After every worker process ended: how long until the lock could be taken (`None`: it
    /// stayed held past every lease and session, i.e. the run left it behind).
    free_after_ms: Option<u64>,
    /// Then, once this parent had taken and released the lock: the holdings and waiters the
    /// store still lists under its name (`None`: the store cannot list them). Anything here
    /// was left behind by the run: a leaked key, node, row or session.
    left_in_store: Option<u64>,
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
            unexplained_overlaps: 0,
            overlaps_past_lease: 0,
            overlaps_allowed: None,
            overlaps_allowed_why: None,
            stale_writes_accepted: 0,
            stale_writes_rejected: 0,
            token_regressions: 0,
            lost_updates: 0,
            lost_signals: 0,
            errors: 0,
            max_recovery_ms: None,
            acquired_during_faults: 0,
            availability_pct: None,
            max_lost_lag_ms: None,
            free_after_ms: None,
            left_in_store: None,
        }
    }

    /// Records the teardown check: how long after the workers ended the lock was free, or
    /// `None` if it was not within `waited`, and what the store still listed under the lock's
    /// name after that (both failures: nothing may stay held or queued).
    pub(super) fn teardown(mut self, teardown: Teardown) -> Cell {
        self.free_after_ms = teardown.free_after.map(|d| d.as_millis() as u64);
        self.left_in_store = teardown.left_in_store;
        let failure = if teardown.free_after.is_none() {
            Some(format!(
                "the lock was still held {} ms after every worker had ended",
                teardown.waited.as_millis()
            ))
        } else {
            teardown
                .left_in_store
                .filter(|&left| left > 0)
                .map(|left| format!("{left} holdings or waiters left in the store at the end"))
        };
        if let (Some(failure), false) = (failure, self.verdict == "FAIL") {
            self.verdict = "FAIL";
            self.note = Some(failure);
        }
        self
    }

    /// Checks one phase by `rule`: `logs` (one per process start), the faults `injected`, the
    /// control counter's final value.
    pub(super) fn check(
        rule: &Rule,
        logs: &[ProcessLog],
        injected: &[Injected],
        counter: u64,
    ) -> Cell {
        let (fault, leases) = (rule.fault, rule.leases);
        let mut cell = Cell::not_applicable(fault, "");
        cell.note = None;
        cell.overlaps_allowed = Some(rule.allowed.overlaps);
        cell.overlaps_allowed_why = Some(rule.allowed.why);
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
        // When each lost signal fired, with its hold's worker and token.
        let mut lost_at: Vec<(u32, u64, u64)> = Vec::new();
        let mut acquired_at: Vec<u64> = Vec::new();
        // When each hold's lease ended by its holder's clock, as it said at its release.
        let mut lease_ends: HashMap<u64, u64> = HashMap::new();
        let mut span = (u64::MAX, 0u64);
        for ProcessLog {
            process,
            events: log,
        } in logs
        {
            let process = *process;
            let last_ns = log.iter().map(event_time).max().unwrap_or(0);
            if let Some(first_ns) = log.iter().map(event_time).min() {
                span = (span.0.min(first_ns), span.1.max(last_ns));
            }
            let mut open: HashMap<u32, (u64, u64)> = HashMap::new();
            for event in log {
                match *event {
                    Event::Acquired {
                        at_ns,
                        worker,
                        token,
                    } => {
                        cell.acquisitions += 1;
                        acquired_at.push(at_ns);
                        open.insert(worker, (at_ns, token));
                    }
                    Event::Releasing {
                        at_ns,
                        worker,
                        valid_until_ns,
                    } => {
                        if let Some((start_ns, token)) = open.remove(&worker) {
                            if let Some(end) = valid_until_ns {
                                lease_ends.insert(token, end);
                            }
                            let hold = Hold {
                                start_ns,
                                end_ns: at_ns,
                                token,
                            };
                            holds.push(Held { hold, process });
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
                    Event::Lost {
                        at_ns,
                        worker,
                        token,
                    } => {
                        cell.lost_signals += 1;
                        lost_at.push((worker, token, at_ns));
                    }
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
            holds.extend(open.into_values().map(|(start_ns, token)| Held {
                hold: Hold {
                    start_ns,
                    end_ns: last_ns.max(start_ns),
                    token,
                },
                process,
            }));
        }
        let held = holds;
        let holds: Vec<Hold> = held.iter().map(|h| h.hold).collect();
        // When each hold's holder was told it had lost the lock (tokens are one per hold).
        let mut told: HashMap<u64, u64> = HashMap::new();
        for &(_, token, at_ns) in &lost_at {
            let first = told.entry(token).or_insert(at_ns);
            *first = (*first).min(at_ns);
        }
        // Each overlap: (the hold overlapped, the hold begun during it). One that began after
        // the earlier holder's lease had ended by its own clock is that holder going on past its
        // lease; any other must be explained by a fault. (The later hold's start is when its
        // acquire returned, up to one round trip after the store granted it.)
        let overlaps: Vec<(Held, Held)> = history::overlaps(&holds)
            .into_iter()
            .map(|(earlier, later)| (held[earlier], held[later]))
            .collect();
        let past_lease = |earlier: Held, later: Held| {
            lease_ends
                .get(&earlier.hold.token)
                .is_some_and(|&end| end <= later.hold.start_ns)
        };
        cell.overlaps_past_lease = overlaps
            .iter()
            .filter(|&&(earlier, later)| past_lease(earlier, later))
            .count() as u64;
        let unexplained: Vec<(Held, Held)> = overlaps
            .into_iter()
            .filter(|&(earlier, later)| !past_lease(earlier, later))
            .filter(|&(earlier, later)| {
                let told_first = told
                    .get(&earlier.hold.token)
                    .is_some_and(|&at| at <= later.hold.start_ns);
                !explained(rule, injected, earlier, later, told_first)
            })
            .collect();
        cell.unexplained_overlaps = unexplained.len() as u64;
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
        cell.max_lost_lag_ms = lost_lag_ns(&holds, &lost_at).map(|ns| ns / 1_000_000);
        let (during, availability) = availability(&acquired_at, injected, span);
        (cell.acquired_during_faults, cell.availability_pct) = (during, availability);
        (cell.verdict, cell.note) = if cell.stale_writes_accepted > 0 || cell.token_regressions > 0
        {
            ("FAIL", Some(verdict.to_string()))
        } else if let Some(&(earlier, later)) = unexplained.first() {
            let lost = match cell.lost_updates {
                0 => String::new(),
                n => format!(" ({n} lost updates)"),
            };
            // The rule's reason is printed beside the cell: here, what it allows.
            let name = fault.name();
            let at = |h: Held| h.hold.start_ns.saturating_sub(span.0) / 1_000_000;
            let which = match (rule.allowed.overlaps, injected.is_empty()) {
                (_, true) => "with no fault injected".to_string(),
                (Overlaps::None, false) => format!("under {name}, which explains none"),
                (Overlaps::OfTheHitHolder, false) => format!(
                    "that the {name} does not explain (only the hold it caught may be \
                     overlapped, by holds taken since it began)"
                ),
                (Overlaps::OfCutOffHolders, false) => format!(
                    "that the {name} does not explain (only a hold of a process it cut off, \
                     held then, may be overlapped, by holds taken since it began)"
                ),
                (Overlaps::OfCutOffHoldersToldFirst, false) => format!(
                    "that the {name} does not explain (only a hold of a process it cut off may \
                     be overlapped, by holds taken since it began and once its holder was told \
                     it had lost the lock)"
                ),
            };
            let faults = match injected.is_empty() {
                true => String::new(),
                false => format!(" ({name}: {})", windows(injected, span.0)),
            };
            (
                "FAIL",
                Some(format!(
                    "{} of {} overlapping holds{lost} {which}: the lock let a second holder in; \
                     first: token {} (process {}) taken at {} ms while token {} (process {}, \
                     taken at {} ms) was held{faults}",
                    cell.unexplained_overlaps,
                    cell.overlapping_holders,
                    later.hold.token,
                    later.process,
                    at(later),
                    earlier.hold.token,
                    earlier.process,
                    at(earlier),
                )),
            )
        } else if cell.lost_updates > 0 && cell.overlapping_holders == 0 {
            // An update is lost only to a read-modify-write inside another hold: an overlap the
            // holds did not show (cut short by a kill), which nothing here explains.
            (
                "FAIL",
                Some(format!(
                    "{} lost updates on the control counter with no overlapping holds",
                    cell.lost_updates
                )),
            )
        } else if fault.leaves_a_majority() && !injected.is_empty() && during == 0 {
            (
                "FAIL",
                Some("no acquisition while a minority of the servers was cut off".into()),
            )
        } else if cell.faults_injected == 0 {
            ("fault not exercised", Some("no fault was injected".into()))
        } else if fault.expects_overlap(leases)
            && cell.overlapping_holders == 0
            && cell.lost_updates == 0
        {
            (
                "fault not exercised",
                Some("no overlap on the control counter or in the holds".into()),
            )
        } else if fault == FaultKind::Stop
            && cell.overlapping_holders == 0
            && cell.lost_updates == 0
        {
            (
                "OK",
                Some(
                    "no second holder: the session kept the stopped holder's lock (stop longer \
                     than the session timeout, --stop-for, to see it handed on)"
                        .into(),
                ),
            )
        } else if fault == FaultKind::ClockJump || fault == FaultKind::Restart {
            let overlapped = cell.overlapping_holders > 0 || cell.lost_updates > 0;
            let note = match (fault, overlapped) {
                (FaultKind::ClockJump, true) => {
                    "the jump let a second holder in: the store judges leases by its wall clock"
                }
                (FaultKind::ClockJump, false) => {
                    "no second holder: the store's leases did not follow its wall clock (or its \
                     servers do not read the --clock-file)"
                }
                (_, true) => "the restart let a second holder in: the store lost the holding",
                (_, false) => "no second holder: the store kept the holding across the restart",
            };
            ("OK", Some(note.into()))
        } else {
            ("OK", None)
        };
        cell
    }
}

/// Whether a fault `injected` explains `later` beginning while `earlier` was held, by `rule`:
/// `earlier` is a hold the fault struck (of the process it hit, or of one it cut off), held
/// while it was on, and `later` began once it had; `told_first`: `earlier`'s holder had been
/// told it lost the lock before `later` began.
fn explained(
    rule: &Rule,
    injected: &[Injected],
    earlier: Held,
    later: Held,
    told_first: bool,
) -> bool {
    injected.iter().any(|fault| {
        let struck = match rule.allowed.overlaps {
            Overlaps::None => return false,
            Overlaps::OfTheHitHolder => fault.process == Some(earlier.process),
            Overlaps::OfCutOffHolders => rule.cut_off.contains(&earlier.process),
            // A session may lapse as the cluster heals too (seen on etcd 2 s after a
            // partition ended): any hold since the fault began, if its holder was told first.
            Overlaps::OfCutOffHoldersToldFirst => {
                return told_first
                    && rule.cut_off.contains(&earlier.process)
                    && earlier.hold.end_ns >= fault.at_ns
                    && later.hold.start_ns >= fault.at_ns;
            }
        };
        struck
            && earlier.hold.start_ns <= fault.until_ns
            && earlier.hold.end_ns >= fault.at_ns
            && later.hold.start_ns >= fault.at_ns
    })
}

/// The faults `injected`, in ms from `origin`, for a note: "1450–3950 ms (process 1), …".
fn windows(injected: &[Injected], origin: u64) -> String {
    let ms = |ns: u64| ns.saturating_sub(origin) / 1_000_000;
    let mut shown: Vec<String> = injected
        .iter()
        .take(4)
        .map(|i| match i.process {
            Some(p) => format!("{}–{} ms (process {p})", ms(i.at_ns), ms(i.until_ns)),
            None => format!("{}–{} ms", ms(i.at_ns), ms(i.until_ns)),
        })
        .collect();
    if injected.len() > shown.len() {
        shown.push(format!("{} more", injected.len() - shown.len()));
    }
    shown.join(", ")
}

/// The longest a lost signal (worker, token, when) fired after another hold began later than
/// its own hold had; `None` when no signal fired.
fn lost_lag_ns(holds: &[Hold], lost_at: &[(u32, u64, u64)]) -> Option<u64> {
    lost_at
        .iter()
        .map(|&(_, token, at_ns)| {
            let Some(own) = holds.iter().find(|h| h.token == token) else {
                return 0;
            };
            holds
                .iter()
                .filter(|h| h.start_ns > own.start_ns && h.token != token)
                .map(|h| h.start_ns)
                .min()
                .map_or(0, |next| at_ns.saturating_sub(next))
        })
        .max()
}

/// Acquisitions while a fault was `injected`, and the rate then in percent of the rate the rest
/// of the phase (`span`: its first and last event); `None` when either stretch is empty.
fn availability(
    acquired_at: &[u64],
    injected: &[Injected],
    span: (u64, u64),
) -> (u64, Option<u64>) {
    let during_fault = |at: u64| injected.iter().any(|i| i.at_ns <= at && at <= i.until_ns);
    let during = acquired_at.iter().filter(|&&at| during_fault(at)).count() as u64;
    let fault_ns: u64 = injected.iter().map(|i| i.until_ns - i.at_ns).sum();
    let calm_ns = span.1.saturating_sub(span.0).saturating_sub(fault_ns);
    let outside = acquired_at.len() as u64 - during;
    if fault_ns == 0 || calm_ns == 0 || outside == 0 {
        return (during, None);
    }
    let rate = |n: u64, ns: u64| n as f64 / ns as f64;
    let pct = 100.0 * rate(during, fault_ns) / rate(outside, calm_ns);
    (during, Some(pct.round() as u64))
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
    /// "lease" or "session": what keeps a holder's lock (a session store ignores the lease).
    pub(super) holds: &'static str,
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
            "{} ({}): {} workers over {} processes, lease {} ms (holds are {}s), {:.0} s per fault",
            self.backend,
            self.url,
            self.workers,
            self.processes,
            self.lease_ms,
            self.holds,
            self.seconds_per_fault
        );
        let header = [
            "fault",
            "acquired",
            "injected",
            "overlaps",
            "unexplained",
            "stale ok",
            "stale refused",
            "token regr",
            "lost upd",
            "lost sig",
            "errors",
            "recovery ms",
            "avail %",
            "lost lag ms",
            "free after ms",
            "left",
            "verdict",
        ];
        let rows: Vec<[String; 17]> = self
            .cells
            .iter()
            .map(|c| {
                [
                    c.fault.name().to_string(),
                    c.acquisitions.to_string(),
                    c.faults_injected.to_string(),
                    c.overlapping_holders.to_string(),
                    c.unexplained_overlaps.to_string(),
                    c.stale_writes_accepted.to_string(),
                    c.stale_writes_rejected.to_string(),
                    c.token_regressions.to_string(),
                    c.lost_updates.to_string(),
                    c.lost_signals.to_string(),
                    c.errors.to_string(),
                    c.max_recovery_ms
                        .map_or("-".to_string(), |ms| ms.to_string()),
                    c.availability_pct
                        .map_or("-".to_string(), |p| p.to_string()),
                    c.max_lost_lag_ms
                        .map_or("-".to_string(), |ms| ms.to_string()),
                    c.free_after_ms.map_or("-".to_string(), |ms| ms.to_string()),
                    c.left_in_store.map_or("-".to_string(), |n| n.to_string()),
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
            if let (Some(allowed), Some(why)) = (c.overlaps_allowed, c.overlaps_allowed_why) {
                let allowed = match allowed {
                    Overlaps::None => "none",
                    Overlaps::OfTheHitHolder => "of the holder it hit",
                    Overlaps::OfCutOffHolders => "of the holders it cut off",
                    Overlaps::OfCutOffHoldersToldFirst => {
                        "of the holders it cut off, once told they lost the lock"
                    }
                };
                println!("{}: overlaps allowed: {allowed} ({why})", c.fault.name());
            }
            if let Some(note) = &c.note {
                println!("{}: {note}", c.fault.name());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use distlock::url::Scheme;

    use super::super::Holding;
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
            Event::Releasing {
                at_ns: end,
                worker,
                valid_until_ns: None,
            },
            Event::Released {
                at_ns: end + 1,
                worker,
                held: true,
            },
        ]
    }

    /// Checks `logs` (log `i` is process `i`'s) under `fault` on Redis (`leases`) or on
    /// PostgreSQL session locks; process 0 is the one the proxies cut off.
    fn check(
        fault: FaultKind,
        leases: bool,
        logs: &[Vec<Event>],
        injected: &[Injected],
        counter: u64,
    ) -> Cell {
        let scheme = if leases {
            Scheme::Redis
        } else {
            Scheme::Postgres
        };
        check_on(scheme, fault, leases, logs, injected, counter)
    }

    fn check_on(
        scheme: Scheme,
        fault: FaultKind,
        leases: bool,
        logs: &[Vec<Event>],
        injected: &[Injected],
        counter: u64,
    ) -> Cell {
        let rule = Rule {
            fault,
            leases,
            allowed: fault.allows(Holding::of(scheme, leases)),
            cut_off: vec![0],
        };
        let logs: Vec<ProcessLog> = logs
            .iter()
            .enumerate()
            .map(|(process, events)| ProcessLog {
                process,
                events: events.clone(),
            })
            .collect();
        Cell::check(&rule, &logs, injected, counter)
    }

    const ONE: [Injected; 1] = [Injected {
        at_ns: 5,
        until_ns: 6,
        process: Some(0),
    }];

    /// `hold` whose holder said at its release that its lease ended at `lease_end`.
    fn hold_with_lease_end(
        worker: u32,
        token: u64,
        (start, end): (u64, u64),
        highest_before: u64,
        lease_end: u64,
    ) -> Vec<Event> {
        let mut events = hold(worker, token, start, end, highest_before);
        for e in &mut events {
            if let Event::Releasing { valid_until_ns, .. } = e {
                *valid_until_ns = Some(lease_end);
            }
        }
        events
    }

    /// A holder that goes on past its lease (stalled between its last check and its write) is
    /// overlapped by the next holder the store let in once that lease had ended: the store kept
    /// its promise, under a fault that explains no overlap too. Let in while the earlier
    /// holder's lease still ran by its own clock, the same overlap fails the cell.
    #[test]
    fn an_overlap_after_the_earlier_lease_ended_is_the_holder_going_on_past_it() {
        // Process 0 holds token 1 from 0 to 100 with its lease ending at 40; process 1 takes
        // token 2 at 50 (one lost update).
        let past = [
            hold_with_lease_end(0, 1, (0, 100), 0, 40),
            hold(1, 2, 50, 60, 1),
        ];
        let cell = check(FaultKind::SessionKill, true, &past, &ONE, 1);
        assert_eq!(cell.overlapping_holders, 1, "{cell:?}");
        assert_eq!(cell.overlaps_past_lease, 1, "{cell:?}");
        assert_eq!(cell.unexplained_overlaps, 0, "{cell:?}");
        assert_eq!(cell.verdict, "OK", "{cell:?}");
        // The lease ran until 70 by its holder's clock: handed on at 50 is a second holder.
        let early = [
            hold_with_lease_end(0, 1, (0, 100), 0, 70),
            hold(1, 2, 50, 60, 1),
        ];
        let cell = check(FaultKind::SessionKill, true, &early, &ONE, 1);
        assert_eq!(cell.overlaps_past_lease, 0, "{cell:?}");
        assert_eq!(cell.unexplained_overlaps, 1, "{cell:?}");
        assert_eq!(cell.verdict, "FAIL", "{cell:?}");
    }

    #[test]
    fn a_second_holder_of_the_same_token_fails_the_cell() {
        let logs = [hold(0, 7, 0, 10, 0), hold(1, 7, 20, 30, 7)];
        let cell = check(FaultKind::Kill, true, &logs, &ONE, 0);
        assert_eq!(cell.stale_writes_accepted, 1);
        assert_eq!(cell.token_regressions, 1);
        assert_eq!(cell.verdict, "FAIL");
    }

    #[test]
    fn lost_lag_counts_from_the_next_holders_acquisition() {
        const MS: u64 = 1_000_000;
        let mut first = hold(0, 1, 0, 100 * MS, 0);
        first.push(Event::Lost {
            at_ns: 50 * MS,
            worker: 0,
            token: 1,
        });
        let logs = [first, hold(1, 2, 20 * MS, 30 * MS, 1)];
        let cell = check(FaultKind::Stop, true, &logs, &ONE, 0);
        assert_eq!(cell.lost_signals, 1);
        assert_eq!(cell.max_lost_lag_ms, Some(30), "{cell:?}");
        // Told before anyone else had the lock: no lag.
        let mut early = hold(0, 1, 0, 10 * MS, 0);
        early.push(Event::Lost {
            at_ns: 5 * MS,
            worker: 0,
            token: 1,
        });
        let logs = [early, hold(1, 2, 20 * MS, 30 * MS, 1)];
        let cell = check(FaultKind::Stop, true, &logs, &ONE, 0);
        assert_eq!(cell.max_lost_lag_ms, Some(0), "{cell:?}");
    }

    #[test]
    fn a_minority_cut_off_with_no_acquisition_meanwhile_fails() {
        let cut = [Injected {
            at_ns: 40,
            until_ns: 90,
            process: None,
        }];
        let logs = [
            hold(0, 1, 0, 10, 0),
            hold(1, 2, 20, 30, 1),
            hold(0, 3, 95, 99, 2),
        ];
        let cell = check(FaultKind::Minority, true, &logs, &cut, 0);
        assert_eq!(cell.acquired_during_faults, 0);
        assert_eq!(cell.availability_pct, Some(0));
        assert_eq!(cell.verdict, "FAIL", "{cell:?}");
        let logs = [
            hold(0, 1, 0, 10, 0),
            hold(1, 2, 50, 60, 1),
            hold(0, 3, 95, 99, 2),
        ];
        let cell = check(FaultKind::Minority, true, &logs, &cut, 0);
        assert_eq!(cell.acquired_during_faults, 1);
        // 1 in the 50 ns of the fault, 2 in the other 50 ns of the phase (0 to 100): half.
        assert_eq!(cell.availability_pct, Some(50), "{cell:?}");
        assert_eq!(cell.verdict, "OK", "{cell:?}");
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
        let cell = check(FaultKind::Stop, true, &logs, &ONE, 0);
        assert!(cell.overlapping_holders > 0, "{cell:?}");
        assert_eq!(cell.token_regressions, 0, "{cell:?}");
    }

    #[test]
    fn a_refused_stale_write_in_an_overlap_is_a_stop_exercised() {
        // Worker 0, paused from 0 to 100, writes after worker 1 held and wrote token 2.
        let logs = [hold(0, 1, 0, 100, 2), hold(1, 2, 20, 30, 1)];
        let cell = check(FaultKind::Stop, true, &logs, &ONE, 0);
        assert_eq!(cell.stale_writes_rejected, 1);
        assert!(cell.overlapping_holders > 0);
        assert_eq!(cell.verdict, "OK", "{cell:?}");
    }

    #[test]
    fn a_stop_without_any_overlap_was_not_exercised() {
        let logs = [hold(0, 1, 0, 10, 0), hold(1, 2, 20, 30, 1)];
        let cell = check(FaultKind::Stop, true, &logs, &ONE, 0);
        assert_eq!(cell.verdict, "fault not exercised");
        let kill = check(FaultKind::Kill, true, &logs, &ONE, 0);
        assert_eq!(kill.verdict, "OK");
        // A session store keeps a stopped holder's lock: no overlap is its promise kept.
        let session = check(FaultKind::Stop, false, &logs, &ONE, 0);
        assert_eq!(session.verdict, "OK", "{session:?}");
        assert!(session.note.unwrap().contains("session"));
        assert_eq!(kill.max_recovery_ms, Some(0), "15 ns rounds down");
        assert_eq!(
            check(FaultKind::Kill, true, &logs, &[], 0).verdict,
            "fault not exercised"
        );
    }

    /// Two workers of different processes, token 2 taken while token 1 was held: the lock let a
    /// second holder in (process 0 held from 0 to 100, process 1 from 20 to 30), and both
    /// counted (a counter of 1 has lost an update).
    fn broken() -> [Vec<Event>; 2] {
        let mut logs = [hold(0, 1, 0, 100, 0), hold(1, 2, 20, 30, 1)];
        for (worker, log) in logs.iter_mut().enumerate() {
            log.push(Event::Counted {
                at_ns: 25,
                worker: worker as u32,
                read: 0,
            });
        }
        logs
    }

    #[test]
    fn an_overlap_with_no_fault_injected_fails() {
        for fault in [FaultKind::Kill, FaultKind::Stop, FaultKind::Delay] {
            let cell = check(fault, true, &broken(), &[], 1);
            assert_eq!(cell.verdict, "FAIL", "{cell:?}");
            assert_eq!(cell.unexplained_overlaps, 1, "{cell:?}");
            let note = cell.note.unwrap();
            assert!(note.contains("with no fault injected"), "{note}");
            assert!(note.contains("token 2 (process 1)"), "{note}");
        }
    }

    #[test]
    fn a_kill_explains_no_overlap() {
        let cell = check(FaultKind::Kill, true, &broken(), &ONE, 1);
        assert_eq!(cell.verdict, "FAIL", "{cell:?}");
        let note = cell.note.unwrap();
        assert!(
            note.contains("1 of 1 overlapping holds (1 lost updates) under kill"),
            "{note}"
        );
        assert!(note.ends_with("(kill: 0–0 ms (process 0))"), "{note}");
    }

    #[test]
    fn a_stop_explains_only_overlaps_of_the_hold_it_caught_from_then_on() {
        // Process 0 held from 0, was stopped at 5: token 2 taken at 20 is the stop's doing.
        assert_eq!(
            check(FaultKind::Stop, true, &broken(), &ONE, 1).verdict,
            "OK"
        );
        // The hold began between the SIGSTOP and the process stopping: still the one caught.
        let sent = [Injected {
            at_ns: 0,
            until_ns: 15,
            process: Some(0),
        }];
        let logs = [hold(0, 1, 1, 100, 0), hold(1, 2, 20, 30, 1)];
        assert_eq!(check(FaultKind::Stop, true, &logs, &sent, 0).verdict, "OK");
        // The stop hit process 1, not the overlapped holder.
        let other = [Injected {
            process: Some(1),
            ..ONE[0]
        }];
        let cell = check(FaultKind::Stop, true, &broken(), &other, 1);
        assert_eq!(cell.verdict, "FAIL", "{cell:?}");
        assert!(cell.note.unwrap().contains("the stop does not explain"));
        // The second holder got in before the stop began.
        let late = [Injected {
            at_ns: 25,
            until_ns: 50,
            process: Some(0),
        }];
        let cell = check(FaultKind::Stop, true, &broken(), &late, 1);
        assert_eq!(cell.verdict, "FAIL", "{cell:?}");
        // A stop of a session lock whose connection stays open explains nothing.
        let cell = check(FaultKind::Stop, false, &broken(), &ONE, 1);
        assert_eq!(cell.verdict, "FAIL", "{cell:?}");
    }

    #[test]
    fn a_reset_explains_overlaps_of_a_cut_off_session_lock_holder_only() {
        let reset = [Injected {
            at_ns: 10,
            until_ns: 15,
            process: None,
        }];
        // Process 0 (behind the proxy) held through the reset: its session ended.
        let cell = check(FaultKind::Reset, false, &broken(), &reset, 1);
        assert_eq!(cell.verdict, "OK", "{cell:?}");
        // A lease outlives a reset.
        let cell = check(FaultKind::Reset, true, &broken(), &reset, 1);
        assert_eq!(cell.verdict, "FAIL", "{cell:?}");
        // Process 1 is not behind the proxy.
        let swapped = [hold(1, 1, 0, 100, 0), hold(0, 2, 20, 30, 1)];
        let logs = [swapped[1].clone(), swapped[0].clone()];
        let cell = check(FaultKind::Reset, false, &logs, &reset, 1);
        assert_eq!(cell.unexplained_overlaps, 1, "{cell:?}");
        assert_eq!(cell.verdict, "FAIL", "{cell:?}");
    }

    #[test]
    fn a_session_cut_off_may_be_handed_on_only_once_its_holder_was_told() {
        let cut = [Injected {
            at_ns: 10,
            until_ns: 50,
            process: None,
        }];
        for fault in [FaultKind::Blackhole, FaultKind::Partition] {
            // Not told before token 2 was taken at 20: a second holder while the session lived.
            let cell = check_on(Scheme::ZooKeeper, fault, false, &broken(), &cut, 1);
            assert_eq!(cell.verdict, "FAIL", "{cell:?}");
            assert!(cell.note.unwrap().contains("told"));
            let mut logs = broken();
            logs[0].push(Event::Lost {
                at_ns: 15,
                worker: 0,
                token: 1,
            });
            let cell = check_on(Scheme::Etcd, fault, false, &logs, &cut, 1);
            assert_eq!(cell.verdict, "OK", "{cell:?}");
            // A session that lapsed as the store recovered: held from 10, after the cut (0 to
            // 5) had ended.
            let healed = [Injected {
                at_ns: 0,
                until_ns: 5,
                process: None,
            }];
            let mut logs = [hold(0, 1, 10, 100, 0), hold(1, 2, 20, 30, 1)];
            logs[0].push(Event::Lost {
                at_ns: 15,
                worker: 0,
                token: 1,
            });
            let cell = check_on(Scheme::Etcd, fault, false, &logs, &healed, 0);
            assert_eq!(cell.overlapping_holders, 1, "{cell:?}");
            assert_eq!(cell.unexplained_overlaps, 0, "{cell:?}");
            // A lease store's majority keeps the lock: told or not.
            let cell = check_on(Scheme::Redlock, FaultKind::Minority, true, &logs, &cut, 1);
            assert_eq!(cell.verdict, "FAIL", "{cell:?}");
        }
    }

    #[test]
    fn a_clock_jump_explains_overlaps_only_where_leases_follow_the_wall_clock() {
        for (scheme, allowed) in [
            (Scheme::Redis, true),
            (Scheme::Redlock, true),
            (Scheme::Postgres, true),
            (Scheme::Mysql, true),
            (Scheme::Memcached, false),
            (Scheme::Sqlite, false),
        ] {
            let cell = check_on(scheme, FaultKind::ClockJump, true, &broken(), &ONE, 1);
            assert_eq!(cell.verdict == "OK", allowed, "{scheme:?}: {cell:?}");
        }
        for scheme in [Scheme::ZooKeeper, Scheme::Etcd] {
            let cell = check_on(scheme, FaultKind::ClockJump, false, &broken(), &ONE, 1);
            assert_eq!(cell.verdict, "FAIL", "{scheme:?}: {cell:?}");
        }
    }

    #[test]
    fn a_session_kill_explains_overlaps_of_session_locks_not_of_leases() {
        let cell = check(FaultKind::SessionKill, false, &broken(), &ONE, 1);
        assert_eq!(cell.verdict, "OK", "{cell:?}");
        let cell = check(FaultKind::SessionKill, true, &broken(), &ONE, 1);
        assert_eq!(cell.verdict, "FAIL", "{cell:?}");
    }

    #[test]
    fn lost_updates_without_overlapping_holds_fail() {
        let logs = [hold(0, 1, 0, 10, 0), hold(1, 2, 20, 30, 1)];
        let mut logs = logs.to_vec();
        for (worker, log) in logs.iter_mut().enumerate() {
            log.push(Event::Counted {
                at_ns: 9,
                worker: worker as u32,
                read: 0,
            });
        }
        let cell = check(FaultKind::Stop, true, &logs, &ONE, 1);
        assert_eq!(cell.lost_updates, 1);
        assert_eq!(cell.verdict, "FAIL", "{cell:?}");
    }
}
