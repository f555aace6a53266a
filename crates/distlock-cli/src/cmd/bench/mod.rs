//! `distlock bench`: the same lock workload against any store URL, so backends and releases can
//! be compared on equal terms.
//!
//! The parent starts P copies of itself (`--child`), each running its share of the workers. Each
//! child connects, says "ready", and waits for one start time (CLOCK_MONOTONIC, shared by every
//! process on the machine) so all processes run over the same window. Each hold is recorded as
//! (lock, fencing token, acquired at, released at, time spent acquiring, worker). The parent
//! then checks each lock's holds with the testkit's history checker
//! ([`distlock_harness::history`]), the same one the conformance suite uses:
//!
//! * no overlap: a hold must end before the next one starts. The recorded interval (from
//!   `acquire` returning to `release` being called) lies inside the store's real hold, so an
//!   overlap here is a real violation, never an artefact of measuring;
//! * fencing order: tokens strictly increase in the order of the holds.
//!
//! # Layout
//!
//! * this file: the arguments, the job and hold record passed between the processes, and the
//!   parent that starts the processes and gathers their holds;
//! * [`worker`]: a child process and its workers' acquire/release loop;
//! * [`report`]: the figures and the safety check over the holds, printed as a table or JSON.
//!
//! Exit status: 0 when no overlap and no token out of order was seen; 1 otherwise or when a
//! process failed; 64 for invalid arguments.

mod report;
mod worker;

use std::fmt;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use distlock_harness::history::Hold;
use serde::{Deserialize, Serialize};

use self::report::Report;
use super::processes;
use crate::duration;

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
    #[arg(long, value_enum, env = "DISTLOCK_BENCH_WORKLOAD")]
    workload: Workload,
    /// Which lock: the exclusive lock or the fair lock.
    #[arg(long, value_enum, default_value = "lock", env = "DISTLOCK_BENCH_KIND")]
    kind: Kind,
    /// Workers in all (tasks, spread evenly over the processes).
    #[arg(long, default_value_t = 16, env = "DISTLOCK_BENCH_WORKERS")]
    workers: usize,
    /// OS processes the workers are spread over.
    #[arg(long, default_value_t = 4, env = "DISTLOCK_BENCH_PROCESSES")]
    processes: usize,
    /// How long to run.
    #[arg(long, default_value = "10s", value_parser = duration::parse, env = "DISTLOCK_BENCH_DURATION")]
    duration: Duration,
    /// How long each worker holds the lock before releasing it.
    #[arg(long, default_value = "0s", value_parser = duration::parse, env = "DISTLOCK_BENCH_HOLD")]
    hold: Duration,
    /// The lease of each lock (renewed by the watchdog while held).
    #[arg(long, default_value = "30s", value_parser = duration::parse, env = "DISTLOCK_BENCH_LEASE")]
    lease: Duration,
    /// Print one JSON object instead of a table.
    #[arg(long, env = "DISTLOCK_JSON", value_parser = clap::builder::BoolishValueParser::new())]
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

/// One hold, as a child reports it to the parent: a line of six numbers,
/// `lock token acquired_ns released_ns wait_us worker`.
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

impl fmt::Display for HoldRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {}",
            self.lock,
            self.hold.token,
            self.hold.start_ns,
            self.hold.end_ns,
            self.wait_us,
            self.worker
        )
    }
}

impl HoldRecord {
    /// Reads a line written by `Display`.
    fn parse(line: &str) -> Result<Self> {
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
}

/// Runs `distlock bench`: the parent, or with `--child` one of its processes.
pub(crate) async fn run(args: BenchArgs) -> ExitCode {
    if let Some(usage) = processes::check_spread("bench", args.workers, args.processes) {
        return usage;
    }
    let outcome = match &args.child {
        Some(job) => worker::run(job, args.url.as_deref()).await,
        None => run_parent(&args).await,
    };
    processes::exit_with("bench", outcome)
}

/// Starts the processes, gives them one start time, gathers their holds and reports.
async fn run_parent(args: &BenchArgs) -> Result<ExitCode> {
    let url = args
        .url
        .clone()
        .unwrap_or_else(|| distlock::DEFAULT_URL.to_string());
    let backend = processes::probe(&url).await?.backend_name().to_string();

    let run = format!("bench/{}", &distlock::OwnerToken::random().as_str()[..12]);
    let mut children = Vec::new();
    let mut first_worker = 0;
    for process in 0..args.processes {
        let workers = processes::share(args.workers, args.processes, process);
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
        children.push(processes::spawn(
            &["bench", "--workload", "contended"],
            &job,
            &url,
        )?);
    }
    let start = processes::start_together(&mut children, Duration::from_millis(50)).await?;
    let end = start + args.duration.as_nanos() as u64;

    let mut holds = Vec::new();
    let mut errors = 0u64;
    for processes::Worker {
        mut child,
        mut stdout,
        ..
    } in children
    {
        while let Some(line) = stdout.next_line().await? {
            if let Some(n) = line.strip_prefix("errors ") {
                errors += n.parse::<u64>().unwrap_or(0);
            } else {
                holds.push(HoldRecord::parse(&line)?);
            }
        }
        let status = child.wait().await?;
        if !status.success() {
            bail!("a bench process failed ({status})");
        }
    }
    let report = Report::new(args, backend, &mut holds, start, end, errors);
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        report.print_table();
    }
    Ok(if report.is_safe() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
