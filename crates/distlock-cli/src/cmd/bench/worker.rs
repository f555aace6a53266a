//! One of the parent's processes (`distlock bench --child JOB`): connect, say "ready", wait for
//! the shared start time, run the job's workers until the end time, then write one
//! [`HoldRecord`] line per hold and a last line `errors N`.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use distlock::Lock;
use distlock_harness::history::Hold;
use distlock_harness::monotonic_ns;
use tokio::io::AsyncWriteExt;

use super::{HoldRecord, Job, Kind, Workload};
use crate::cmd::processes::{self, sleep_until_ns};

/// Runs the process's share of the workers; `job` is the parent's [`Job`] as JSON.
pub(super) async fn run(job: &str, url: Option<&str>) -> Result<ExitCode> {
    let job: Job = serde_json::from_str(job).context("reading the bench job")?;
    let url = url.context("the parent passes DISTLOCK_URL")?;
    let client = distlock::connect(url).await?;
    let start = processes::ready_then_start().await?;
    let end = start + job.duration_ms * 1_000_000;

    let mut workers = Vec::new();
    for i in 0..job.workers {
        let worker = (job.first_worker + i) as u32;
        let lock_index = match job.workload {
            Workload::Uncontended => worker,
            Workload::Contended => 0,
        };
        let name = format!("{}/{lock_index}", job.run);
        let lock = match job.kind {
            Kind::Lock => client.lock(&name),
            Kind::Fair => client.fair_lock(&name),
        };
        // On a session store the lease is at least the session's expiry, and SQL session locks
        // take none (their holding is the connection's): what the store keeps, not a refusal.
        let lock = crate::cmd::keepable(&client, lock, Duration::from_millis(job.lease_ms));
        let hold = Duration::from_micros(job.hold_us);
        workers.push(tokio::spawn(async move {
            sleep_until_ns(start).await;
            cycle(&lock, lock_index, worker, hold, end).await
        }));
    }
    let mut out = String::new();
    let mut errors = 0;
    for w in workers {
        let (records, e) = w.await?;
        errors += e;
        for r in records {
            let _ = writeln!(out, "{r}");
        }
    }
    out.push_str(&format!("errors {errors}\n"));
    let mut stdout = tokio::io::stdout();
    stdout.write_all(out.as_bytes()).await?;
    stdout.flush().await?;
    Ok(ExitCode::SUCCESS)
}

/// One worker: acquire, hold for `hold`, release, until `end` (CLOCK_MONOTONIC ns). Returns its
/// holds and how many acquisitions or releases failed.
async fn cycle(
    lock: &Lock,
    lock_index: u32,
    worker: u32,
    hold: Duration,
    end: u64,
) -> (Vec<HoldRecord>, u64) {
    let mut records = Vec::new();
    let mut errors = 0u64;
    loop {
        let asked = monotonic_ns();
        if asked >= end {
            break;
        }
        // Past the end, stop waiting: a worker never blocks the report.
        let wait_for = Duration::from_nanos(end - asked) + Duration::from_secs(1);
        let guard = match lock.acquire_timeout(wait_for).await {
            Ok(g) => g,
            Err(e) if e.is_timeout() => break,
            Err(e) => {
                errors += 1;
                eprintln!(
                    "distlock bench: acquire failed: {}",
                    distlock::error::chain(&e)
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let acquired_ns = monotonic_ns();
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        let token = guard.fencing_token().get();
        let released_ns = monotonic_ns();
        if let Err(e) = guard.release().await {
            errors += 1;
            eprintln!(
                "distlock bench: release failed: {}",
                distlock::error::chain(&e)
            );
        }
        records.push(HoldRecord {
            lock: lock_index,
            hold: Hold {
                start_ns: acquired_ns,
                end_ns: released_ns,
                token,
            },
            wait_us: (acquired_ns - asked) / 1_000,
            worker,
        });
    }
    (records, errors)
}
