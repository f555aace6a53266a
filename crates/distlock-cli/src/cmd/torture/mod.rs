//! `distlock torture`: a fault-injection run against any store URL, and the history checker's
//! verdict on what the lock promised under each fault.
//!
//! For each fault asked for, one phase of `--duration`: the parent starts P worker processes
//! (copies of itself, `--child`, started together on one CLOCK_MONOTONIC start time as `distlock
//! bench` does, [`super::processes`]) whose workers loop acquire → read the control counter →
//! random pause → write the hold's fencing token to the fenced resource → write the counter + 1
//! → release, on one lock name. Meanwhile the driver ([`driver`]) injects the fault again and
//! again. Every process logs what it did and saw ([`events`]); at the end the report
//! ([`report`]) reads every log and checks the holds with the testkit's history checker.
//!
//! * the **fenced resource** (the testkit's `FencedFile`) accepts a write only with a token at
//!   least the largest it accepted: a stale holder is refused, and a second holder of the same
//!   token is caught by the checker;
//! * the **control counter** is a plain read-modify-write file: its lost increments show that
//!   two workers really were inside at once, i.e. that the fault was exercised.
//!
//! # Layout
//!
//! * this file: the arguments, the job passed to a worker process, and the phases;
//! * [`worker`]: a worker process and its workers' loop;
//! * [`driver`]: the fault drivers (SIGKILL and SIGSTOP of a holder, the fault proxy);
//! * [`events`]: the event logs; [`report`]: the checker's figures and verdicts, as a table or
//!   JSON.
//!
//! # The verdict
//!
//! A cell fails on a stale write the fence accepted, a token out of order, and on any overlap
//! of holds (or lost update on the control counter) that the injected faults do not explain.
//! What a fault may explain depends on the store's promise under it ([`FaultKind::allows`]): a
//! `stop` of a lease holder may have its hold overlapped, from the stop on, and no other hold;
//! a ZooKeeper or etcd holder cut off may lose its session, but only once it was told; a `kill`,
//! or a `clock-jump` on a store whose leases run on a monotonic clock, explains no overlap at
//! all; with no fault injected, every overlap fails.
//!
//! Exit status: 0 when no cell failed; 1 when one did (a stale write accepted, a token out of
//! order, an overlap no fault explains, a lock left held) or the run itself failed; 64 for
//! invalid arguments.

mod driver;
mod events;
mod failover;
mod report;
mod sessions;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use distlock::url::Scheme;
use distlock_harness::faults::FaultProxy;
use distlock_harness::monotonic_ns;
use serde::{Deserialize, Serialize};

use self::report::{Cell, Report, Rule, Teardown};
use super::processes;
use super::progress::Progress;
use crate::{EXIT_USAGE, duration};

/// A fault the driver can inject.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FaultKind {
    /// SIGKILL a process while it holds; the parent starts it again.
    Kill,
    /// SIGSTOP a holding process for --stop-for, then SIGCONT it.
    Stop,
    /// Delay traffic both ways by a quarter lease ± an eighth, through the fault proxy (one
    /// per server of the URL).
    Delay,
    /// Partition half the processes from the store (connections open, nothing forwarded) for
    /// two leases.
    Blackhole,
    /// Reset every connection of half the processes to the store, and new ones, for a fifth
    /// of a lease.
    Reset,
    /// End a holder's database sessions from the server (PostgreSQL, MySQL/MariaDB), keeping
    /// the holder stopped for half a lease meanwhile.
    #[serde(rename = "session-kill")]
    SessionKill,
    /// Restart the store with --restart-cmd (whatever the store keeps across it: persistence,
    /// replication) while a holder is stopped for half its lease, then start a newcomer that
    /// asks for the lock at once: a store that lost the holding lets it in.
    Restart,
    /// Cut a minority of the URL's servers (1 of 3, 2 of 5: Redlock masters, members of an
    /// etcd or ZooKeeper ensemble) off from every worker for three leases (connections open,
    /// nothing forwarded), a different minority each time. The store must stay available.
    Minority,
    /// Split the store's cluster for three leases with `--partition-cmd` (run with
    /// `DISTLOCK_PARTITION=cut`, then `heal`): a minority of its members cut off from the
    /// others while every worker still reaches every member. The store must stay available,
    /// and a member on the minority side (a leader cut off included) must not let a second
    /// holder in.
    Partition,
    /// Jump the store's wall clock forward by two leases (`--clock-file`: the servers run with
    /// their clock offset read from that file) while a holder is stopped for half its lease,
    /// and start a newcomer process that asks for the lock at once: short of the lease, so any
    /// second holder is the jump's doing. A store that judges leases by its wall clock lets
    /// the newcomer in; one on a monotonic clock does not.
    #[serde(rename = "clock-jump")]
    ClockJump,
    /// SIGKILL the master of a `redis-sentinel://` group right after takes (replication made
    /// to lag at random, the replica that kept up sometimes killed too), let the Sentinels
    /// promote a replica, start the killed nodes again as its replicas (`failover.rs`). The
    /// group must run on this machine and be the run's own.
    Failover,
}

impl FaultKind {
    /// The fault goes through the fault proxy (so needs a store reached over TCP).
    fn needs_proxy(self) -> bool {
        matches!(
            self,
            FaultKind::Delay | FaultKind::Blackhole | FaultKind::Reset | FaultKind::Minority
        )
    }

    /// The fault must let a second worker in (a holder that no longer holds keeps working):
    /// a run where the control counter shows no overlap did not exercise it. Only where holds
    /// are leases: a session store keeps a stopped holder's lock while its session lives (the
    /// connection, or a session timeout longer than the stop), so no second holder is the
    /// promise kept there, not a fault missed.
    /// A session killed from the server frees a session lock at once (its holder learns at its
    /// next check), and never a lease.
    fn expects_overlap(self, leases: bool) -> bool {
        match self {
            FaultKind::Stop => leases,
            FaultKind::SessionKill => !leases,
            _ => false,
        }
    }

    /// The fault leaves a majority of the store's servers reachable and joined: the lock must
    /// still be taken while it is on.
    fn leaves_a_majority(self) -> bool {
        matches!(self, FaultKind::Minority | FaultKind::Partition)
    }

    /// Which overlapping holds this fault may explain on a store whose holdings end as
    /// `holding` says, and why: what the store promises under it (each backend's docs.md, "what
    /// breaks it"). The workload's holds last a twentieth of a lease at most, so a fault that
    /// leaves a holding in the store for a lease or more cannot hand the lock on within one:
    /// there the store promises exclusion, and any overlap fails the cell.
    fn allows(self, holding: Holding) -> Allowed {
        use Holding::{ConnectionSession, Lease, TimedSession};
        let (overlaps, why) = match (self, holding) {
            (FaultKind::Kill, _) => (
                Overlaps::None,
                "a killed holder believes nothing: its hold ends with its last step",
            ),
            (FaultKind::Stop, ConnectionSession) => (
                Overlaps::None,
                "a stopped holder's connection stays open, and its session lock with it",
            ),
            (FaultKind::Stop, _) => (
                Overlaps::OfTheHitHolder,
                "a holder stopped past its lease or session timeout loses the lock while it \
                 believes it holds",
            ),
            (FaultKind::SessionKill, ConnectionSession) => (
                Overlaps::OfTheHitHolder,
                "the server ending a session hands its lock on at once",
            ),
            (FaultKind::SessionKill, _) => (
                Overlaps::None,
                "a lease outlives its holder's sessions: it reconnects at its next renewal",
            ),
            (FaultKind::Restart, _) => (
                Overlaps::OfTheHitHolder,
                "a restart loses the holdings the store does not keep on disk",
            ),
            (FaultKind::ClockJump, Lease { wall_clock: true }) => (
                Overlaps::OfTheHitHolder,
                "the store judges leases by its wall clock: a jump ends them early",
            ),
            (FaultKind::ClockJump, _) => (
                Overlaps::None,
                "the store times holdings by a monotonic clock, which a wall-clock jump leaves \
                 alone",
            ),
            (FaultKind::Delay, _) => (
                Overlaps::None,
                "a delay of a quarter lease ± an eighth ends no lease or session",
            ),
            (FaultKind::Blackhole, TimedSession) => (
                Overlaps::OfCutOffHoldersToldFirst,
                "a session cut off for two leases may expire, handing its lock on once its \
                 holder was told",
            ),
            (FaultKind::Blackhole, Lease { .. }) => (
                Overlaps::None,
                "a cut-off holder's lease lasts longer than its hold",
            ),
            (FaultKind::Blackhole, ConnectionSession) => (
                Overlaps::None,
                "a silent connection stays open, and its session lock with it",
            ),
            (FaultKind::Reset, ConnectionSession) => (
                Overlaps::OfCutOffHolders,
                "a reset connection ends its session, handing its lock on",
            ),
            (FaultKind::Reset, _) => (
                Overlaps::None,
                "a reset of a fifth of a lease ends no lease or session",
            ),
            (FaultKind::Minority | FaultKind::Partition, TimedSession) => (
                Overlaps::OfCutOffHoldersToldFirst,
                "a session kept alive through a member cut off may expire before its client \
                 moves it to another, or as the cluster heals, handing its lock on once its \
                 holder was told; no second holder while it lives",
            ),
            (FaultKind::Minority | FaultKind::Partition, _) => (
                Overlaps::None,
                "the majority of the store's servers keeps the lock",
            ),
            (FaultKind::Failover, _) => (
                Overlaps::OfCutOffHolders,
                "Redis replicates asynchronously: a take no promoted replica has is lost with \
                 the master, and a second holder gets in (wait_replicas below the replica count \
                 narrows this, a correlated failure still hits it)",
            ),
        };
        Allowed { overlaps, why }
    }

    fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Stop => "stop",
            FaultKind::Delay => "delay",
            FaultKind::Blackhole => "blackhole",
            FaultKind::Reset => "reset",
            FaultKind::SessionKill => "session-kill",
            FaultKind::Restart => "restart",
            FaultKind::Minority => "minority",
            FaultKind::Partition => "partition",
            FaultKind::ClockJump => "clock-jump",
            FaultKind::Failover => "failover",
        }
    }
}

/// What ends a holding in a store, as far as the verdict needs it (each backend's docs.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holding {
    /// A lease the store times, by its wall clock (Redis, Redlock's masters, PostgreSQL and
    /// MySQL/MariaDB lease locks: a jump of it ends leases early) or a monotonic one (memcached,
    /// SQLite's CLOCK_BOOTTIME).
    Lease { wall_clock: bool },
    /// A session the store ends once the client has been silent for its timeout (ZooKeeper,
    /// etcd), on a monotonic clock.
    TimedSession,
    /// A session that lasts as long as the holder's connection (PostgreSQL and MySQL/MariaDB
    /// `?lock=session`).
    ConnectionSession,
}

impl Holding {
    /// The holdings of the store at `scheme`, leases or sessions.
    fn of(scheme: Scheme, leases: bool) -> Holding {
        match (scheme, leases) {
            (Scheme::Memcached | Scheme::Sqlite, true) => Holding::Lease { wall_clock: false },
            (Scheme::Postgres | Scheme::Mysql, false) => Holding::ConnectionSession,
            (Scheme::ZooKeeper | Scheme::Etcd, _) => Holding::TimedSession,
            // Redis, Redlock, SQL lease locks; a store not known here gets the weakest promise.
            (_, true) => Holding::Lease { wall_clock: true },
            (_, false) => Holding::TimedSession,
        }
    }
}

/// Overlapping holds a fault may explain; any other overlap fails the cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Overlaps {
    /// None: the store promises exclusion under the fault.
    None,
    /// Those of the hold the fault caught (the one its process held when the fault began), by
    /// holds begun since the fault began.
    OfTheHitHolder,
    /// Those of a hold of a process the fault cut off from the store, held while it was, by
    /// holds begun since the fault began.
    OfCutOffHolders,
    /// Those of a hold of a process the fault cut off from the store, held since the fault
    /// began (while it was on, or as the store recovered), by holds begun once the holder had
    /// been told it lost the lock: a store that lets a holder's session lapse tells the holder
    /// before it hands the lock on.
    OfCutOffHoldersToldFirst,
}

/// A cell's rule: which overlaps its fault may explain on the store, and why.
#[derive(Clone, Copy, Debug)]
struct Allowed {
    overlaps: Overlaps,
    why: &'static str,
}

/// Arguments of `distlock torture`.
#[derive(clap::Args, Debug)]
pub(crate) struct TortureArgs {
    /// Store URL [default: $DISTLOCK_URL, else sqlite:distlock.db in the working directory].
    #[arg(long, env = "DISTLOCK_URL", hide_env_values = true)]
    url: Option<String>,
    /// Faults to inject, one phase each, comma-separated: kill, stop, delay, blackhole, reset,
    /// session-kill, restart, minority, partition, clock-jump, failover.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "kill,stop",
        env = "DISTLOCK_TORTURE_FAULTS"
    )]
    faults: Vec<FaultKind>,
    /// How long each fault's phase runs.
    #[arg(long, default_value = "10s", value_parser = duration::parse, env = "DISTLOCK_TORTURE_DURATION")]
    duration: Duration,
    /// Worker processes.
    #[arg(long, default_value_t = 2, env = "DISTLOCK_TORTURE_PROCESSES")]
    processes: usize,
    /// Workers in all (tasks, spread evenly over the processes), all on one lock name.
    #[arg(long, default_value_t = 4, env = "DISTLOCK_TORTURE_WORKERS")]
    workers: usize,
    /// The lease of the lock (renewed by the watchdog while held): a killed holder's lock
    /// should be free again after about this long.
    #[arg(long, default_value = "1s", value_parser = duration::parse, env = "DISTLOCK_TORTURE_LEASE")]
    lease: Duration,
    /// How long a `stop` keeps a holder stopped [default: 2.5 leases]. To see a session store
    /// (ZooKeeper, etcd) hand a stopped holder's lock on, make it longer than the session
    /// timeout.
    #[arg(long, value_parser = duration::parse, env = "DISTLOCK_TORTURE_STOP_FOR")]
    stop_for: Option<Duration>,
    /// For `restart`: a shell command that restarts the store and returns once it is started
    /// again (e.g. `systemctl restart redis-server`). Its output goes to the phase's directory.
    #[arg(long, env = "DISTLOCK_TORTURE_RESTART_CMD")]
    restart_cmd: Option<String>,
    /// For `partition`: a shell command that splits the store's cluster when run with
    /// `DISTLOCK_PARTITION=cut` (a minority of the members no longer reaching the others, every
    /// member still reached by clients) and joins it again with `DISTLOCK_PARTITION=heal`;
    /// each returns once done. The test suite's cuts off an etcd leader from its followers.
    #[arg(long, env = "DISTLOCK_TORTURE_PARTITION_CMD")]
    partition_cmd: Option<String>,
    /// For `clock-jump`: the file the store's servers read their wall-clock offset from, in
    /// signed seconds (`+2.5`): the testkit's clock shim (`DISTLOCK_CLOCK_FILE`) or libfaketime
    /// (`FAKETIME_TIMESTAMP_FILE` with `FAKETIME_NO_CACHE=1`). Each jump moves it forward.
    #[arg(long, env = "DISTLOCK_TORTURE_CLOCK_FILE")]
    clock_file: Option<PathBuf>,
    /// For `failover`: how many failovers to run; the phase lasts until they are done (instead
    /// of --duration). Each takes a few seconds (the Sentinels' down-after time, the election,
    /// the killed nodes' resync).
    #[arg(long, env = "DISTLOCK_TORTURE_FAILOVERS")]
    failovers: Option<usize>,
    /// Keep each phase's event logs (one JSONL file per worker process start), fenced resource
    /// and control counter in this directory, a subdirectory per fault, instead of removing
    /// them: to read what happened around a failed check. A fault's subdirectory left there by
    /// an earlier run is replaced.
    #[arg(long, env = "DISTLOCK_TORTURE_LOGS")]
    logs: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long, env = "DISTLOCK_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    json: bool,
    /// Internal: run as one of the parent's worker processes, with this job (JSON).
    #[arg(long, hide = true)]
    child: Option<String>,
}

/// What a worker process is asked to do.
#[derive(Serialize, Deserialize, Debug, Clone)]
struct Job {
    /// The lock name.
    lock: String,
    /// The first worker number this process runs, and how many.
    first_worker: u32,
    workers: u32,
    lease_ms: u64,
    /// The longest pause inside a hold, between reading and writing.
    pause_max_us: u64,
    /// How long to run from the start time the parent sends (ns) ...
    duration_ns: u64,
    /// ... or, for a process started again mid-phase, when the others stop (CLOCK_MONOTONIC
    /// ns).
    end_ns: Option<u64>,
    /// This process's event log, the fenced resource and the control counter.
    log: PathBuf,
    fenced: PathBuf,
    counter: PathBuf,
    /// A file whose appearance ends the run early (a phase that lasts until its faults are
    /// done: `--failovers`).
    #[serde(default)]
    stop_file: Option<PathBuf>,
}

/// Runs `distlock torture`: the parent, or with `--child` one of its worker processes.
pub(crate) async fn run(args: TortureArgs) -> ExitCode {
    if let Some(usage) = processes::check_spread("torture", args.workers, args.processes) {
        return usage;
    }
    if args.lease < Duration::from_millis(100) || args.duration.is_zero() {
        eprintln!("distlock torture: need a lease of at least 100ms and a duration above 0");
        return ExitCode::from(EXIT_USAGE);
    }
    let outcome = match &args.child {
        Some(job) => worker::run(job, args.url.as_deref()).await,
        None => run_parent(&args).await,
    };
    processes::exit_with("torture", outcome)
}

/// Runs one phase per fault and reports.
async fn run_parent(args: &TortureArgs) -> Result<ExitCode> {
    let url = args
        .url
        .clone()
        .unwrap_or_else(|| distlock::DEFAULT_URL.to_string());
    let scheme = match Scheme::of(&url) {
        Ok(scheme) => scheme,
        Err(e) => {
            eprintln!("distlock torture: {e}");
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    };
    // The servers behind the proxies: the URL's host:port pairs.
    let upstream = if scheme == Scheme::Sqlite {
        None
    } else {
        match servers(&url, scheme) {
            Ok(servers) => Some(servers),
            Err(why) if args.faults.iter().any(|f| f.needs_proxy()) => {
                eprintln!("distlock torture: {why}");
                return Ok(ExitCode::from(EXIT_USAGE));
            }
            Err(_) => None,
        }
    };
    let client = processes::probe(&url).await?;
    let backend = client.backend_name().to_string();
    let leases = client.backend().capabilities().renews();
    drop(client);

    // The run's event logs, fenced resources and counters: kept in --logs, else removed.
    let temporary = match &args.logs {
        Some(_) => None,
        None => Some(
            tempfile::Builder::new()
                .prefix("distlock-torture-")
                .tempdir()
                .context("creating the run's directory")?,
        ),
    };
    let dir = match (&args.logs, &temporary) {
        (_, Some(temporary)) => temporary.path().to_path_buf(),
        (logs, None) => {
            let logs = logs.clone().unwrap_or_default();
            std::fs::create_dir_all(&logs)
                .with_context(|| format!("creating {}", logs.display()))?;
            logs
        }
    };
    let run = format!("torture/{}", &distlock::OwnerToken::random().as_str()[..12]);
    let phase_ns = args.duration.as_nanos() as u64;
    let progress = Progress::start(
        format!("torture {backend}"),
        args.faults.len() as u64 * args.duration.as_secs().max(1),
        None,
    );
    let mut cells = Vec::new();
    for &fault in &args.faults {
        if fault.needs_proxy() && upstream.is_none() {
            cells.push(Cell::not_applicable(
                fault,
                "no server to put a proxy in front of (sqlite is embedded)",
            ));
            continue;
        }
        if fault == FaultKind::Restart && args.restart_cmd.is_none() {
            cells.push(Cell::not_applicable(
                fault,
                "no --restart-cmd to restart the store with",
            ));
            continue;
        }
        if fault == FaultKind::Partition && args.partition_cmd.is_none() {
            cells.push(Cell::not_applicable(
                fault,
                "no --partition-cmd to split the store's cluster with",
            ));
            continue;
        }
        if fault == FaultKind::ClockJump && args.clock_file.is_none() {
            cells.push(Cell::not_applicable(
                fault,
                "no --clock-file that the store's servers take their wall clock from",
            ));
            continue;
        }
        if let (FaultKind::Minority, Some(servers)) = (fault, &upstream)
            && servers.len() < 3
        {
            cells.push(Cell::not_applicable(
                fault,
                &format!(
                    "the URL names {} server(s): a minority needs a cluster of 3 or more",
                    servers.len()
                ),
            ));
            continue;
        }
        if fault == FaultKind::Failover && !url.starts_with("redis-sentinel://") {
            cells.push(Cell::not_applicable(
                fault,
                "only Redis behind Sentinel (redis-sentinel://) fails over",
            ));
            continue;
        }
        if fault == FaultKind::SessionKill && !matches!(scheme, Scheme::Postgres | Scheme::Mysql) {
            cells.push(Cell::not_applicable(
                fault,
                "only PostgreSQL and MySQL/MariaDB sessions are ended from the server",
            ));
            continue;
        }
        let phase = Phase {
            fault,
            args,
            url: &url,
            upstream: upstream.as_deref(),
            scheme,
            leases,
            dir: dir.join(fault.name()),
            lock: format!("{run}/{}", fault.name()),
            phase_ns,
        };
        cells.push(phase.run(&progress).await?);
    }
    progress.finish();
    let report = Report {
        backend,
        url: distlock::redact(&url),
        processes: args.processes,
        workers: args.workers,
        lease_ms: args.lease.as_millis() as u64,
        holds: if leases { "lease" } else { "session" },
        seconds_per_fault: args.duration.as_secs_f64(),
        cells,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        report.print_table();
    }
    Ok(if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The URL's servers, as `host:port`; each must name its port. An object store's server is its
/// `?endpoint=` (the host of an `s3://` or `az://` URL is the bucket).
fn servers(url: &str, scheme: Scheme) -> std::result::Result<Vec<String>, String> {
    if scheme == Scheme::ObjectStore {
        return endpoint_server(url).map(|(_, server, _)| vec![server]);
    }
    let authority = distlock::url::authority(url, scheme.backend(), "scheme://host:port")
        .map_err(|e| e.to_string())?;
    authority
        .hosts
        .iter()
        .map(|one| match one.port {
            Some(port) => Ok(format!("{}:{port}", one.host)),
            None => Err(format!(
                "the proxy faults need each server's port in the URL ({})",
                distlock::redact(url)
            )),
        })
        .collect()
}

/// An object store URL's `?endpoint=` taken apart around its server: what comes before the
/// `host:port` (up to `://`), the `host:port` itself (the scheme's port when none is written),
/// and what follows it.
fn endpoint_server(url: &str) -> std::result::Result<(String, String, String), String> {
    let no_endpoint = || {
        format!(
            "the proxy faults need an ?endpoint=http://host:port to put the proxy in front of ({})",
            distlock::redact(url)
        )
    };
    let at = url.find("endpoint=").ok_or_else(no_endpoint)? + "endpoint=".len();
    let value_end = url[at..].find('&').map_or(url.len(), |i| at + i);
    let value = &url[at..value_end];
    let (scheme, rest) = value.split_once("://").ok_or_else(no_endpoint)?;
    let server_len = rest.find('/').unwrap_or(rest.len());
    let server = &rest[..server_len];
    let with_port = match (server.rsplit_once(':'), scheme) {
        (Some((_, port)), _) if port.parse::<u16>().is_ok() => server.to_string(),
        (_, "https") => format!("{server}:443"),
        _ => format!("{server}:80"),
    };
    let before = format!("{}{scheme}://", &url[..at]);
    let after = url[at + scheme.len() + 3 + server_len..].to_string();
    Ok((before, with_port, after))
}

/// `url` reaching its store through `hosts` instead: the URL's servers replaced, or an object
/// store's endpoint.
fn through(url: &str, scheme: Scheme, hosts: &str) -> Result<String> {
    if scheme == Scheme::ObjectStore {
        let (before, _, after) = endpoint_server(url).map_err(|why| anyhow!(why))?;
        return Ok(format!("{before}{hosts}{after}"));
    }
    distlock::url::with_hosts(url, hosts).context("the URL has no host to replace")
}

/// One fault's phase.
struct Phase<'a> {
    fault: FaultKind,
    args: &'a TortureArgs,
    url: &'a str,
    /// The servers (host:port) a proxy fault goes in front of, one proxy each.
    upstream: Option<&'a [String]>,
    scheme: Scheme,
    /// Whether holds are leases (else sessions).
    leases: bool,
    /// The phase's logs, fenced resource and control counter.
    dir: PathBuf,
    lock: String,
    phase_ns: u64,
}

impl Phase<'_> {
    async fn run(self, progress: &Progress) -> Result<Cell> {
        // A --logs directory used before holds an earlier run's phase: its fenced resource
        // (another store's tokens) would refuse this run's writes, its logs would be read again.
        if self.dir.exists() {
            std::fs::remove_dir_all(&self.dir)
                .with_context(|| format!("clearing {}", self.dir.display()))?;
        }
        std::fs::create_dir_all(&self.dir)?;
        let mut proxies = Vec::new();
        if let (true, Some(servers)) = (self.fault.needs_proxy(), self.upstream) {
            for server in servers {
                let addr = tokio::net::lookup_host(server.as_str())
                    .await
                    .with_context(|| format!("resolving {server}"))?
                    .next()
                    .ok_or_else(|| anyhow!("{server} resolves to no address"))?;
                proxies.push(
                    FaultProxy::start_to(addr)
                        .await
                        .map_err(|f| anyhow!("starting the fault proxy: {}", f.0))?,
                );
            }
        }
        let proxied_url = if proxies.is_empty() {
            None
        } else {
            let hosts: Vec<String> = proxies
                .iter()
                .map(|p| format!("127.0.0.1:{}", p.port()))
                .collect();
            Some(through(self.url, self.scheme, &hosts.join(","))?)
        };
        let killer = match self.fault {
            FaultKind::SessionKill => {
                sessions::SessionKiller::connect(self.url, self.scheme).await?
            }
            _ => None,
        };
        // The database's port, by which the holder's connections to it are found.
        let server_port = self
            .upstream
            .and_then(|servers| servers.first())
            .and_then(|server| server.rsplit(':').next())
            .and_then(|port| port.parse().ok())
            .unwrap_or(0);
        let lease = self.args.lease;
        let processes = self.args.processes;
        let (group, allowed) = match self.fault {
            FaultKind::Failover => {
                let group = failover::Group::of(self.url)?;
                let allowed = failover::allowed(self.url, group.replica_count().await?);
                (Some(group), allowed)
            }
            _ => (
                None,
                self.fault.allows(Holding::of(self.scheme, self.leases)),
            ),
        };
        // A phase that lasts until its failovers are done ends its workers with this file.
        let until_done = self.fault == FaultKind::Failover && self.args.failovers.is_some();
        let stop_file = until_done.then(|| self.dir.join("stop"));
        let phase_ns = match self.args.failovers {
            // An upper bound: each failover takes seconds, the stop file ends the phase.
            Some(n) if until_done => (failover::LONGEST * n as u32).as_nanos() as u64,
            _ => self.phase_ns,
        };
        let mut pool = driver::Pool::new(processes);
        // The processes that reach the store through the proxies.
        let mut cut_off = Vec::new();
        let mut first_worker = 0u32;
        for process in 0..processes {
            let workers = processes::share(self.args.workers, processes, process) as u32;
            let job = Job {
                lock: self.lock.clone(),
                first_worker,
                workers,
                lease_ms: lease.as_millis() as u64,
                // Short against the lease: a holder is caught by a fault mid-hold, not one that
                // outlives its lease by itself. A failover's holds may last longer than it takes
                // (up to a lease, with a lease longer than the failover: the watchdog renews),
                // so a holder it catches may still hold when the new master answers.
                pause_max_us: match self.fault {
                    FaultKind::Failover => lease.as_micros() as u64,
                    _ => (lease / 20).as_micros() as u64,
                },
                duration_ns: phase_ns,
                end_ns: None,
                log: PathBuf::new(),
                fenced: self.dir.join("fenced"),
                counter: self.dir.join("counter"),
                stop_file: stop_file.clone(),
            };
            first_worker += workers;
            // Half the processes (at least one) reach the store through the proxy, the others
            // directly: a partition or reset cuts some clients off while others go on. A
            // minority of servers is cut off from everyone.
            let url = match &proxied_url {
                Some(proxied) if process % 2 == 0 || self.fault == FaultKind::Minority => {
                    cut_off.push(process);
                    proxied.as_str()
                }
                _ => self.url,
            };
            pool.add(job, url.to_string(), &self.dir)?;
        }
        // A partition cuts members off from each other: any process may be reaching the store
        // through one cut off.
        // Every process writes to the master a failover kills.
        if matches!(self.fault, FaultKind::Partition | FaultKind::Failover) {
            cut_off = (0..processes).collect();
        }
        // The phase runs from when every process is ready; a process started again mid-phase
        // ends with the rest.
        let end_ns = pool.start_all().await? + phase_ns;
        let mut driver = driver::Driver {
            fault: self.fault,
            lease,
            stop_for: self.args.stop_for.unwrap_or(lease * 5 / 2),
            pool,
            proxies: &proxies,
            killer,
            server_port,
            restart_cmd: self.args.restart_cmd.as_deref(),
            partition_cmd: self.args.partition_cmd.as_deref(),
            clock_file: self.args.clock_file.as_deref(),
            group,
            failovers: self.args.failovers.filter(|_| until_done),
            end_ns,
            progress,
        };
        let injected = driver.run(&self.dir).await?;
        let end_ns = match &stop_file {
            Some(stop_file) => {
                std::fs::write(stop_file, b"")?;
                monotonic_ns().min(end_ns)
            }
            None => end_ns,
        };
        let logs = driver.pool.finish(end_ns, lease).await?;
        let counter = std::fs::read_to_string(self.dir.join("counter"))
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or(0);
        let rule = Rule {
            fault: self.fault,
            leases: self.leases,
            allowed,
            cut_off,
        };
        let cell = Cell::check(&rule, &logs, &injected, counter);
        Ok(cell.teardown(self.teardown().await?))
    }

    /// How long after the workers ended this parent could take the lock, waiting as long as a
    /// killed or stopped holder's lease or session can keep it; then, once it released it,
    /// what the store still lists under the lock's name (nothing, unless the run leaked it).
    async fn teardown(&self) -> Result<Teardown> {
        let lease = self.args.lease.max(self.args.stop_for.unwrap_or_default());
        let waited = lease * 4 + Duration::from_secs(10);
        let client = distlock::connect(self.url).await?;
        let started = std::time::Instant::now();
        let free_after = match client.lock(&self.lock).acquire_timeout(waited).await {
            Ok(guard) => {
                let free_after = started.elapsed();
                guard.release().await?;
                Some(free_after)
            }
            Err(e) if e.kind() == distlock::ErrorKind::Timeout => None,
            Err(e) => return Err(e.into()),
        };
        let left_in_store = match (free_after, client.status(&self.lock).await) {
            (Some(_), Ok(locks)) => Some(
                locks
                    .iter()
                    .map(|l| l.holdings.len() as u64 + l.waiters.unwrap_or(0))
                    .sum(),
            ),
            (Some(_), Err(e)) if e.kind() != distlock::ErrorKind::Unsupported => {
                return Err(e.into());
            }
            _ => None,
        };
        Ok(Teardown {
            free_after,
            waited,
            left_in_store,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_store_url_is_proxied_at_its_endpoint() {
        let url = "s3://k:s@b/p?endpoint=http://127.0.0.1:9000&region=us-east-1";
        assert_eq!(
            servers(url, Scheme::ObjectStore).unwrap(),
            vec!["127.0.0.1:9000".to_string()]
        );
        assert_eq!(
            through(url, Scheme::ObjectStore, "127.0.0.1:4000").unwrap(),
            "s3://k:s@b/p?endpoint=http://127.0.0.1:4000&region=us-east-1"
        );
        let az = "az://a:k@c?endpoint=http://127.0.0.1:10000/devstoreaccount1";
        assert_eq!(
            through(az, Scheme::ObjectStore, "127.0.0.1:4001").unwrap(),
            "az://a:k@c?endpoint=http://127.0.0.1:4001/devstoreaccount1"
        );
        assert!(servers("s3://bucket", Scheme::ObjectStore).is_err());
        assert_eq!(
            servers(
                "s3://bucket?endpoint=https://minio.internal",
                Scheme::ObjectStore
            )
            .unwrap(),
            vec!["minio.internal:443".to_string()]
        );
    }
}
