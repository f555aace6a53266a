//! One worker process (`distlock torture --child JOB`): connect, say "ready", wait for the start
//! time, then run the job's workers on the one lock until the end time, logging every step.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use distlock::Lock;
use distlock_harness::faults::random::Random;
use distlock_harness::fenced::FencedFile;
use distlock_harness::monotonic_ns;

use super::Job;
use super::events::{Event, EventLog};
use crate::cmd::processes::{self, sleep_until_ns};

/// Runs the process's workers; `job` is the parent's [`Job`] as JSON.
pub(super) async fn run(job: &str, url: Option<&str>) -> Result<ExitCode> {
    let job: Job = serde_json::from_str(job).context("reading the torture job")?;
    let url = url.context("the parent passes DISTLOCK_URL")?;
    let log = Arc::new(EventLog::create(&job.log)?);
    let client = distlock::connect(url).await?;
    let start = processes::ready_then_start().await?;
    let end_ns = job.end_ns.unwrap_or(start + job.duration_ns);
    let job = Arc::new(job);
    let random = Arc::new(Random::default());
    let mut workers = Vec::new();
    for i in 0..job.workers {
        // On a session store the lease is at least the session's expiry, and SQL session locks
        // take none (their holding is the connection's): what the store keeps, not a refusal.
        let lock = crate::cmd::keepable(
            &client,
            client.lock(&job.lock),
            Duration::from_millis(job.lease_ms),
        );
        let (job, log, random) = (job.clone(), log.clone(), random.clone());
        workers.push(tokio::spawn(async move {
            sleep_until_ns(start).await;
            cycle(&lock, job.first_worker + i, end_ns, &job, &log, &random).await;
        }));
    }
    for w in workers {
        w.await?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One worker: acquire → read the counter → random pause → fenced write → counter + 1 →
/// release, until the end time. Failures are logged and the loop goes on: a fault is expected
/// to make calls fail.
async fn cycle(lock: &Lock, worker: u32, end_ns: u64, job: &Job, log: &EventLog, random: &Random) {
    let fenced = FencedFile::new(&job.fenced);
    let lease = Duration::from_millis(job.lease_ms);
    let failed = |message: String| {
        log.write(&Event::Failed {
            at_ns: monotonic_ns(),
            worker,
            message,
        })
    };
    loop {
        let now = monotonic_ns();
        if now >= end_ns || job.stop_file.as_ref().is_some_and(|f| f.exists()) {
            break;
        }
        // Past the end, stop waiting: a worker never holds the report up.
        let wait_for = Duration::from_nanos(end_ns - now) + lease;
        let guard = match lock.acquire_timeout(wait_for).await {
            Ok(g) => g,
            Err(e) if e.is_timeout() => break,
            Err(e) => {
                failed(format!("acquire: {}", distlock::error::chain(&e)));
                tokio::time::sleep(lease / 10).await;
                continue;
            }
        };
        let token = guard.fencing_token().get();
        log.write(&Event::Acquired {
            at_ns: monotonic_ns(),
            worker,
            token,
        });
        // The lost signal, logged when it fires during the hold.
        let lost = guard.lost();
        let lost_watch = async {
            lost.await;
            log.write(&Event::Lost {
                at_ns: monotonic_ns(),
                worker,
                token,
            });
            std::future::pending::<()>().await
        };
        // The file calls block, so they run with `block_in_place`, which hands this thread's
        // other tasks (the watchdog, the store's connection) to another thread meanwhile: the
        // fenced file's `flock` waits as long as a holder stopped inside its write keeps it, and
        // a runtime thread blocked that long starved the watchdog, so the waiting holder's lease
        // lapsed (`stop` on Redis: a hold of 1.5 s, overlapped by the resumed holder).
        let work = async {
            let read = tokio::task::block_in_place(|| read_counter(&job.counter));
            tokio::time::sleep(random.up_to(Duration::from_micros(job.pause_max_us))).await;
            // Written even when the guard says the lease is lost: the fence must refuse it.
            let lost_known = guard.is_lost();
            match tokio::task::block_in_place(|| fenced.write_checked(token)) {
                Ok(write) => log.write(&Event::Wrote {
                    at_ns: monotonic_ns(),
                    worker,
                    token,
                    accepted: write.accepted,
                    highest_before: write.highest_before,
                    lost_known,
                }),
                Err(e) => failed(format!("fenced write: {e}")),
            }
            match tokio::task::block_in_place(|| write_counter(&job.counter, read + 1, worker)) {
                Ok(()) => log.write(&Event::Counted {
                    at_ns: monotonic_ns(),
                    worker,
                    read,
                }),
                Err(e) => failed(format!("counter write: {e}")),
            }
        };
        tokio::select! {
            () = work => {}
            () = lost_watch => unreachable!("the lost watch never ends"),
        }
        let (now, at_ns) = (std::time::Instant::now(), monotonic_ns());
        // The lease's end on the same clock as the events: the checker tells a store that
        // handed the lock on too soon from a holder that went on past its lease.
        let valid_until_ns =
            guard
                .valid_until()
                .map(|until| match until.checked_duration_since(now) {
                    Some(left) => at_ns + left.as_nanos() as u64,
                    None => at_ns.saturating_sub(now.duration_since(until).as_nanos() as u64),
                });
        log.write(&Event::Releasing {
            at_ns,
            worker,
            valid_until_ns,
        });
        match guard.release().await {
            Ok(held) => log.write(&Event::Released {
                at_ns: monotonic_ns(),
                worker,
                held,
            }),
            Err(e) => failed(format!("release: {}", distlock::error::chain(&e))),
        }
    }
}

/// The control counter's value (0 before the first write, or if a write was cut short).
fn read_counter(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// Replaces the control counter's value whole (write a file, rename it over), so a reader sees
/// an old value or the new one, never a half-written one: lost increments are then real
/// overlaps, not torn reads.
fn write_counter(path: &Path, value: u64, worker: u32) -> std::io::Result<()> {
    let next = path.with_extension(format!("{}-{worker}", std::process::id()));
    std::fs::write(&next, value.to_string())?;
    std::fs::rename(&next, path)
}
