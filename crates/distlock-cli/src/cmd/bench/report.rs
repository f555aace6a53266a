//! The figures of a run, from every process's holds: throughput, hand-offs, wait times,
//! fairness and the safety check; printed as a table or one JSON object.

use std::collections::HashMap;

use distlock_harness::history;
use serde::Serialize;

use super::{BenchArgs, HoldRecord, Kind, Workload};

/// The figures `distlock bench` prints.
#[derive(Serialize, Debug)]
pub(super) struct Report {
    workload: Workload,
    kind: Kind,
    backend: String,
    workers: usize,
    processes: usize,
    seconds: f64,
    cycles: u64,
    cycles_per_sec: f64,
    handoffs_per_sec: f64,
    p50_us: u64,
    p99_us: u64,
    min_per_worker: u64,
    max_per_worker: u64,
    overlaps: u64,
    token_order_violations: u64,
    errors: u64,
}

impl Report {
    /// Works out the figures of a run that was to last from `start` to `end` (CLOCK_MONOTONIC
    /// ns); sorts `holds`.
    pub(super) fn new(
        args: &BenchArgs,
        backend: String,
        holds: &mut [HoldRecord],
        start: u64,
        end: u64,
        errors: u64,
    ) -> Report {
        // Each lock's holds in the order they happened.
        holds.sort_by_key(|r| (r.lock, r.hold.start_ns));
        let mut overlaps = 0;
        let mut token_order_violations = 0;
        let mut handoffs = 0;
        for one_lock in holds.chunk_by(|a, b| a.lock == b.lock) {
            let verdict = history::check(one_lock.iter().map(|r| r.hold));
            overlaps += verdict.overlaps;
            token_order_violations += verdict.token_order_violations;
            handoffs += one_lock
                .windows(2)
                .filter(|pair| pair[0].worker != pair[1].worker)
                .count() as u64;
        }
        let mut per_worker: HashMap<u32, u64> = (0..args.workers as u32).map(|w| (w, 0)).collect();
        for r in holds.iter() {
            *per_worker.entry(r.worker).or_default() += 1;
        }
        let mut waits: Vec<u64> = holds.iter().map(|r| r.wait_us).collect();
        waits.sort_unstable();
        let pct = |p: usize| {
            if waits.is_empty() {
                0
            } else {
                waits[(waits.len() * p / 100).min(waits.len() - 1)]
            }
        };
        let last_release = holds.iter().map(|r| r.hold.end_ns).max().unwrap_or(end);
        let seconds = (last_release.max(end) - start) as f64 / 1e9;
        let cycles = holds.len() as u64;
        Report {
            workload: args.workload,
            kind: args.kind,
            backend,
            workers: args.workers,
            processes: args.processes,
            seconds,
            cycles,
            cycles_per_sec: cycles as f64 / seconds,
            handoffs_per_sec: handoffs as f64 / seconds,
            p50_us: pct(50),
            p99_us: pct(99),
            min_per_worker: per_worker.values().copied().min().unwrap_or(0),
            max_per_worker: per_worker.values().copied().max().unwrap_or(0),
            overlaps,
            token_order_violations,
            errors,
        }
    }

    /// No two holds of a lock overlapped and every token was in order.
    pub(super) fn is_safe(&self) -> bool {
        self.overlaps == 0 && self.token_order_violations == 0
    }

    /// One `name value` line per figure.
    pub(super) fn print_table(&self) {
        let rows: [(&str, String); 16] = [
            ("workload", format!("{:?}", self.workload).to_lowercase()),
            ("kind", format!("{:?}", self.kind).to_lowercase()),
            ("backend", self.backend.clone()),
            ("workers", self.workers.to_string()),
            ("processes", self.processes.to_string()),
            ("seconds", format!("{:.2}", self.seconds)),
            ("cycles", self.cycles.to_string()),
            ("cycles_per_sec", format!("{:.0}", self.cycles_per_sec)),
            ("handoffs_per_sec", format!("{:.0}", self.handoffs_per_sec)),
            ("p50_us", self.p50_us.to_string()),
            ("p99_us", self.p99_us.to_string()),
            ("min_per_worker", self.min_per_worker.to_string()),
            ("max_per_worker", self.max_per_worker.to_string()),
            ("overlaps", self.overlaps.to_string()),
            (
                "token_order_violations",
                self.token_order_violations.to_string(),
            ),
            ("errors", self.errors.to_string()),
        ];
        for (name, value) in rows {
            println!("{name:<24} {value}");
        }
    }
}
