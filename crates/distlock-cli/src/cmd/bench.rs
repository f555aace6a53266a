//! `distlock bench`: the same lock workload against any store URL, so backends and releases can
//! be compared on equal terms.
//!
//! The parent starts P copies of itself (`--child`), each running its share of the workers. Each
//! child connects, says "ready", and waits for one start time (CLOCK_MONOTONIC, shared by every
//! process on the machine) so all processes run over the same window. Each hold is recorded as
//! (lock, fencing token, acquired at, released at, time spent acquiring, worker). The parent
//! then checks each lock's holds with the testkit's history checker
//! ([`distlock_testkit::history`]), the same one the conformance suite uses:
//!
//! * no overlap: a hold must end before the next one starts. The recorded interval (from
//!   `acquire` returning to `release` being called) lies inside the store's real hold, so an
//!   overlap here is a real violation, never an artefact of measuring;
//! * fencing order: tokens strictly increase in the order of the holds.

use std::collections::HashMap;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use distlock_testkit::history::{self, Hold};
use distlock_testkit::monotonic_ns;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::{EXIT_USAGE, duration};

/// What the workers do.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Workload {
    /// Each worker takes and releases its own lock name in a loop.
    Uncontended,
    /// All workers, over all processes, compete for one lock name.
    Contended,
}

/// Which kind of lock the workers take.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    /// The exclusive, reentrant lock (`client.lock`).
    Lock,
    /// The first-come-first-served lock (`client.fair_lock`).
    Fair,
}

/// Arguments of `distlock bench`.
#[derive(clap::Args, Debug)]
pub(crate) struct BenchArgs {
    /// Store URL [default: $DISTLOCK_URL, else sqlite:distlock.db in the working directory].
    #[arg(long, env = "DISTLOCK_URL", hide_env_values = true)]
    url: Option<String>,
    /// uncontended: a lock name per worker; contended: one name for all.
    #[arg(long, value_enum)]
    workload: Workload,
    /// Which lock: the exclusive lock or the fair lock.
    #[arg(long, value_enum, default_value = "lock")]
    kind: Kind,
    /// Workers in all (tasks, spread evenly over the processes).
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// OS processes the workers are spread over.
    #[arg(long, default_value_t = 4)]
    processes: usize,
    /// How long to run.
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    duration: Duration,
    /// How long each worker holds the lock before releasing it.
    #[arg(long, default_value = "0s", value_parser = duration::parse)]
    hold: Duration,
    /// The lease of each lock (renewed by the watchdog while held).
    #[arg(long, default_value = "30s", value_parser = duration::parse)]
    lease: Duration,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Internal: run as one of the parent's child processes, with this job (JSON).
    #[arg(long, hide = true)]
    child: Option<String>,
}

/// What a child process is asked to do.
#[derive(Serialize, Deserialize, Debug)]
struct Job {
    workload: Workload,
    kind: Kind,
    /// Index of this process, and the first worker number it runs.
    process: usize,
    first_worker: usize,
    workers: usize,
    duration_ms: u64,
    hold_us: u64,
    lease_ms: u64,
    /// Prefix of this run's lock names.
    run: String,
}

/// One hold, as a child reports it to the parent.
#[derive(Clone, Copy, Debug)]
struct HoldRecord {
    /// Which lock (0 for the contended workload, the worker number otherwise).
    lock: u32,
    /// Fencing token and when the hold began and ended.
    hold: Hold,
    /// How long `acquire` took.
    wait_us: u64,
    worker: u32,
}

/// The figures `distlock bench` prints.
#[derive(Serialize, Debug)]
struct Report {
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

pub(crate) async fn run(args: BenchArgs) -> ExitCode {
    if args.workers == 0 || args.processes == 0 || args.processes > args.workers {
        eprintln!(
            "distlock bench: need 1 <= processes <= workers (got {} workers over {} processes)",
            args.workers, args.processes
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let outcome = match &args.child {
        Some(job) => run_child(job, args.url.as_deref()).await,
        None => run_parent(&args).await,
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("distlock bench: {}", distlock::error::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

async fn sleep_until_ns(at: u64) {
    let now = monotonic_ns();
    if at > now {
        tokio::time::sleep(Duration::from_nanos(at - now)).await;
    }
}

async fn run_parent(args: &BenchArgs) -> Result<ExitCode> {
    let url = args
        .url
        .clone()
        .unwrap_or_else(|| distlock::DEFAULT_URL.to_string());
    // Fail early, with the store's own message, if the URL is wrong or the store is down.
    // The error names the URL (redacted) itself.
    let probe = distlock::connect(&url).await?;
    let backend = probe.backend_name().to_string();
    drop(probe);

    let run = format!("bench/{}", &distlock::OwnerToken::random().as_str()[..12]);
    let exe = std::env::current_exe().context("finding the distlock executable")?;
    let mut children = Vec::new();
    let mut first_worker = 0;
    for process in 0..args.processes {
        let workers =
            args.workers / args.processes + usize::from(process < args.workers % args.processes);
        let job = Job {
            workload: args.workload,
            kind: args.kind,
            process,
            first_worker,
            workers,
            duration_ms: args.duration.as_millis() as u64,
            hold_us: args.hold.as_micros() as u64,
            lease_ms: args.lease.as_millis() as u64,
            run: run.clone(),
        };
        first_worker += workers;
        let mut child = Command::new(&exe)
            .arg("bench")
            .arg("--workload")
            .arg("contended")
            .arg("--child")
            .arg(serde_json::to_string(&job)?)
            // The URL goes in the environment, not the job: other users can read a command line
            // (ps, /proc/PID/cmdline), and the URL may hold a password.
            .env("DISTLOCK_URL", &url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting a bench process")?;
        let stdin = child.stdin.take().context("child stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("child stdout")?);
        children.push((child, stdin, stdout.lines()));
    }

    // Barrier: every process connected, then one start time for all.
    for (_, _, lines) in children.iter_mut() {
        match lines.next_line().await? {
            Some(line) if line == "ready" => {}
            other => bail!("a bench process failed to start (said {other:?})"),
        }
    }
    let start = monotonic_ns() + 50_000_000;
    let end = start + args.duration.as_nanos() as u64;
    for (_, stdin, _) in children.iter_mut() {
        stdin.write_all(format!("{start}\n").as_bytes()).await?;
        stdin.flush().await?;
    }

    let mut holds = Vec::new();
    let mut errors = 0u64;
    for (mut child, _stdin, mut lines) in children {
        while let Some(line) = lines.next_line().await? {
            if let Some(n) = line.strip_prefix("errors ") {
                errors += n.parse::<u64>().unwrap_or(0);
            } else {
                holds.push(parse_hold(&line)?);
            }
        }
        let status = child.wait().await?;
        if !status.success() {
            bail!("a bench process failed ({status})");
        }
    }
    let report = analyse(args, backend, &mut holds, start, end, errors);
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_table(&report);
    }
    Ok(
        if report.overlaps == 0 && report.token_order_violations == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        },
    )
}

fn parse_hold(line: &str) -> Result<HoldRecord> {
    let mut f = line.split(' ').map(str::parse::<u64>);
    let mut next = || -> Result<u64> {
        f.next()
            .ok_or_else(|| anyhow!("short hold record {line:?}"))?
            .with_context(|| format!("bad hold record {line:?}"))
    };
    Ok(HoldRecord {
        lock: next()? as u32,
        hold: Hold {
            token: next()?,
            start_ns: next()?,
            end_ns: next()?,
        },
        wait_us: next()?,
        worker: next()? as u32,
    })
}

fn analyse(
    args: &BenchArgs,
    backend: String,
    holds: &mut [HoldRecord],
    start: u64,
    end: u64,
    errors: u64,
) -> Report {
    // Judge each lock's holds in the order they happened.
    holds.sort_by_key(|h| (h.lock, h.hold.start_ns));
    let mut overlaps = 0;
    let mut token_order_violations = 0;
    let mut handoffs = 0;
    for one_lock in holds.chunk_by(|a, b| a.lock == b.lock) {
        let verdict = history::check(one_lock.iter().map(|h| h.hold));
        overlaps += verdict.overlaps;
        token_order_violations += verdict.token_order_violations;
        handoffs += one_lock
            .windows(2)
            .filter(|pair| pair[0].worker != pair[1].worker)
            .count() as u64;
    }
    let mut per_worker: HashMap<u32, u64> = (0..args.workers as u32).map(|w| (w, 0)).collect();
    for h in holds.iter() {
        *per_worker.entry(h.worker).or_default() += 1;
    }
    let mut waits: Vec<u64> = holds.iter().map(|h| h.wait_us).collect();
    waits.sort_unstable();
    let pct = |p: usize| {
        if waits.is_empty() {
            0
        } else {
            waits[(waits.len() * p / 100).min(waits.len() - 1)]
        }
    };
    let last_release = holds.iter().map(|h| h.hold.end_ns).max().unwrap_or(end);
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

fn print_table(r: &Report) {
    let rows: [(&str, String); 16] = [
        ("workload", format!("{:?}", r.workload).to_lowercase()),
        ("kind", format!("{:?}", r.kind).to_lowercase()),
        ("backend", r.backend.clone()),
        ("workers", r.workers.to_string()),
        ("processes", r.processes.to_string()),
        ("seconds", format!("{:.2}", r.seconds)),
        ("cycles", r.cycles.to_string()),
        ("cycles_per_sec", format!("{:.0}", r.cycles_per_sec)),
        ("handoffs_per_sec", format!("{:.0}", r.handoffs_per_sec)),
        ("p50_us", r.p50_us.to_string()),
        ("p99_us", r.p99_us.to_string()),
        ("min_per_worker", r.min_per_worker.to_string()),
        ("max_per_worker", r.max_per_worker.to_string()),
        ("overlaps", r.overlaps.to_string()),
        (
            "token_order_violations",
            r.token_order_violations.to_string(),
        ),
        ("errors", r.errors.to_string()),
    ];
    for (name, value) in rows {
        println!("{name:<24} {value}");
    }
}

async fn run_child(job: &str, url: Option<&str>) -> Result<ExitCode> {
    let job: Job = serde_json::from_str(job).context("reading the bench job")?;
    let url = url.context("the parent passes DISTLOCK_URL")?;
    let client = distlock::connect(url).await?;
    let mut stdout = tokio::io::stdout();
    stdout.write_all(b"ready\n").await?;
    stdout.flush().await?;
    let mut start = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut start)
        .await?;
    let start: u64 = start.trim().parse().context("reading the start time")?;
    let end = start + job.duration_ms * 1_000_000;

    let mut workers = Vec::new();
    for i in 0..job.workers {
        let worker = job.first_worker + i;
        let lock_index = match job.workload {
            Workload::Uncontended => worker as u32,
            Workload::Contended => 0,
        };
        let name = format!("{}/{lock_index}", job.run);
        let lock = match job.kind {
            Kind::Lock => client.lock(&name),
            Kind::Fair => client.fair_lock(&name),
        }
        .lease(Duration::from_millis(job.lease_ms));
        let hold = Duration::from_micros(job.hold_us);
        workers.push(tokio::spawn(async move {
            sleep_until_ns(start).await;
            let mut holds = Vec::new();
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
                holds.push(HoldRecord {
                    lock: lock_index,
                    hold: Hold {
                        start_ns: acquired_ns,
                        end_ns: released_ns,
                        token,
                    },
                    wait_us: (acquired_ns - asked) / 1_000,
                    worker: worker as u32,
                });
            }
            (holds, errors)
        }));
    }
    let mut out = String::new();
    let mut errors = 0;
    for w in workers {
        let (holds, e) = w.await?;
        errors += e;
        for h in holds {
            use std::fmt::Write;
            let _ = writeln!(
                out,
                "{} {} {} {} {} {}",
                h.lock, h.hold.token, h.hold.start_ns, h.hold.end_ns, h.wait_us, h.worker
            );
        }
    }
    out.push_str(&format!("errors {errors}\n"));
    stdout.write_all(out.as_bytes()).await?;
    stdout.flush().await?;
    Ok(ExitCode::SUCCESS)
}
