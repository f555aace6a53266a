//! The fault drivers: the worker processes of a phase ([`Pool`]), and the [`Driver`] that hits
//! them (SIGKILL, SIGSTOP/SIGCONT of a holder) or their traffic (the fault proxy) again and again
//! until the phase ends.
//!
//! A holder is found without asking it: the driver stops a process with SIGSTOP, then reads its
//! event log. A stopped process writes nothing more, so the log says exactly whether one of its
//! workers is between `acquired` and `releasing`. If none is, it gets SIGCONT at once (a waiter
//! paused for a moment changes nothing) and the driver tries the next process.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use distlock_harness::faults::random::Random;
use distlock_harness::faults::{Fault, FaultProxy};
use distlock_harness::monotonic_ns;

use super::events::{self, Injected, ProcessLog};
use super::failover::{self, Group};
use super::sessions::SessionKiller;
use super::{FaultKind, Job};
use crate::cmd::processes::{self, Worker};
use crate::cmd::progress::Progress;

/// One worker process slot: its job and URL, the process now running it, and the logs of
/// every start (a killed process is started again with a new log).
struct Slot {
    job: Job,
    url: String,
    running: Option<Worker>,
    logs: Vec<PathBuf>,
}

/// The phase's worker processes.
pub(super) struct Pool {
    slots: Vec<Slot>,
    /// A newcomer process readied but not started yet.
    newcomer: Option<usize>,
}

impl Pool {
    pub(super) fn new(processes: usize) -> Self {
        Pool {
            slots: Vec::with_capacity(processes),
            newcomer: None,
        }
    }

    /// Adds process number `slots.len()` with `job`, logging into `dir`; not started yet.
    pub(super) fn add(&mut self, job: Job, url: String, dir: &Path) -> Result<()> {
        let process = self.slots.len();
        let mut slot = Slot {
            job,
            url,
            running: None,
            logs: Vec::new(),
        };
        slot.spawn(process, dir)?;
        self.slots.push(slot);
        Ok(())
    }

    /// Starts every process on one start time; returns it.
    pub(super) async fn start_all(&mut self) -> Result<u64> {
        let mut workers: Vec<Worker> = self
            .slots
            .iter_mut()
            .filter_map(|s| s.running.take())
            .collect();
        let start = processes::start_together(&mut workers, Duration::from_millis(50)).await?;
        for (slot, worker) in self.slots.iter_mut().zip(workers) {
            slot.running = Some(worker);
            slot.job.end_ns = Some(start + slot.job.duration_ns);
        }
        Ok(start)
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    /// The pid of process `process`, if it runs.
    fn pid(&self, process: usize) -> Result<u32> {
        match self.slots[process]
            .running
            .as_ref()
            .and_then(|w| w.child.id())
        {
            Some(pid) => Ok(pid),
            None => bail!("worker process {process} is not running"),
        }
    }

    /// Sends `sig` to process `process` if it runs.
    fn signal(&self, process: usize, sig: i32) -> Result<()> {
        let pid = self.pid(process)?;
        // SAFETY: kill(2) takes two integers and touches no memory of ours. `pid` is our own
        // child's, positive, and tokio gives it only until the child is reaped, so it cannot
        // name a process that reused the number.
        if unsafe { libc::kill(pid as libc::pid_t, sig) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("signalling worker process {process}"));
        }
        Ok(())
    }

    /// Stops process `process` (SIGSTOP) and waits until every thread of it has stopped:
    /// kill(2) returns before a thread running on another core has taken the signal, and in that
    /// moment it may still release the lock and log it, after the log was read as "holding" (a
    /// `stop` cell once hit nobody that way: 49 takes during the stop, none overlapping).
    async fn stop(&self, process: usize) -> Result<()> {
        self.signal(process, libc::SIGSTOP)?;
        let pid = self.pid(process)?;
        match tokio::time::timeout(Duration::from_secs(5), processes::stopped(pid)).await {
            Ok(()) => Ok(()),
            Err(_) => {
                bail!("worker process {process} (pid {pid}) did not stop within 5 s of SIGSTOP")
            }
        }
    }

    /// Whether a worker logged a take after `since_ns` (CLOCK_MONOTONIC), by the current logs.
    pub(super) fn took_since(&self, since_ns: u64) -> Result<bool> {
        for (process, slot) in self.slots.iter().enumerate() {
            if self.newcomer == Some(process) {
                continue;
            }
            let Some(log) = slot.logs.last() else {
                continue;
            };
            let took = events::read(log)?
                .iter()
                .rev()
                .any(|e| matches!(e, events::Event::Acquired { at_ns, .. } if *at_ns > since_ns));
            if took {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether the (stopped) process `process` holds the lock, by its current log.
    fn holds(&self, process: usize) -> Result<bool> {
        // A newcomer not started yet has no log, and holds nothing.
        if self.newcomer == Some(process) {
            return Ok(false);
        }
        let log = self.slots[process].logs.last().context("no log")?;
        Ok(events::holding(&events::read(log)?))
    }

    /// Kills process `process` (stopped or not), reaps it, and starts it again at once.
    async fn kill_and_restart(&mut self, process: usize, dir: &Path) -> Result<()> {
        self.signal(process, libc::SIGKILL)?;
        let slot = &mut self.slots[process];
        if let Some(mut worker) = slot.running.take() {
            worker.child.wait().await?;
        }
        slot.spawn(process, dir)?;
        let mut worker = [slot.running.take().context("just started")?];
        processes::start_together(&mut worker, Duration::ZERO).await?;
        let [worker] = worker;
        slot.running = Some(worker);
        Ok(())
    }

    /// Starts one more process, of one worker, up to its "ready" (connected, waiting for its
    /// start time), for `clock-jump` and `restart`: a newcomer, started with
    /// [`start_newcomer`](Self::start_newcomer) once the fault is on, whose first take then
    /// comes straight away, as a new request's would (the workers already waiting sleep until
    /// the lease they last saw ends or a release wakes them). Readied before the fault, so its
    /// start-up (a process, connections to every server) does not eat into the fault's window.
    /// It runs the job of process 0 otherwise, and ends with the rest.
    async fn ready_newcomer(&mut self, dir: &Path) -> Result<()> {
        let first = &self.slots[0];
        let mut job = first.job.clone();
        job.first_worker = self
            .slots
            .iter()
            .map(|s| s.job.first_worker + s.job.workers)
            .max()
            .unwrap_or(0);
        job.workers = 1;
        let mut slot = Slot {
            job,
            url: first.url.clone(),
            running: None,
            logs: Vec::new(),
        };
        slot.spawn(self.slots.len(), dir)?;
        slot.running
            .as_mut()
            .context("just started")?
            .wait_ready()
            .await?;
        self.slots.push(slot);
        self.newcomer = Some(self.slots.len() - 1);
        Ok(())
    }

    /// Lets the newcomer [`ready_newcomer`](Self::ready_newcomer) made start now.
    async fn start_newcomer(&mut self) -> Result<()> {
        let Some(process) = self.newcomer.take() else {
            return Ok(());
        };
        let worker = self.slots[process]
            .running
            .as_mut()
            .context("the newcomer is not running")?;
        worker.send_start(monotonic_ns()).await
    }

    /// Waits for every process to end (they stop at `end_ns`, and a call in flight may take up
    /// to a few leases); kills any still running well after. Returns every log's events.
    pub(super) async fn finish(mut self, end_ns: u64, lease: Duration) -> Result<Vec<ProcessLog>> {
        let grace = lease * 4 + Duration::from_secs(10);
        for slot in self.slots.iter_mut() {
            let Some(mut worker) = slot.running.take() else {
                continue;
            };
            let left = Duration::from_nanos(end_ns.saturating_sub(monotonic_ns())) + grace;
            match tokio::time::timeout(left, worker.child.wait()).await {
                Ok(status) => {
                    let status = status?;
                    if !status.success() {
                        bail!("a worker process failed ({status})");
                    }
                }
                Err(_) => {
                    // Stuck past the end (e.g. a call that never returns): its log still counts.
                    let _ = worker.child.start_kill();
                    let _ = worker.child.wait().await;
                }
            }
        }
        let mut logs = Vec::new();
        for (process, slot) in self.slots.iter().enumerate() {
            for log in &slot.logs {
                logs.push(ProcessLog {
                    process,
                    events: events::read(log)?,
                });
            }
        }
        Ok(logs)
    }
}

impl Slot {
    /// Starts the process with a new log (it then says "ready" and waits for a start time).
    fn spawn(&mut self, process: usize, dir: &Path) -> Result<()> {
        let log = dir.join(format!("process-{process}-start-{}.jsonl", self.logs.len()));
        self.job.log = log.clone();
        self.running = Some(processes::spawn(&["torture"], &self.job, &self.url)?);
        self.logs.push(log);
        Ok(())
    }
}

/// Injects one kind of fault until the phase ends.
pub(super) struct Driver<'a> {
    pub(super) fault: FaultKind,
    pub(super) lease: Duration,
    /// How long a `stop` lasts.
    pub(super) stop_for: Duration,
    pub(super) pool: Pool,
    /// One per server; a proxy fault is put on all of them at once.
    pub(super) proxies: &'a [FaultProxy],
    /// For `session-kill`: a connection to the database, and the database's port.
    pub(super) killer: Option<SessionKiller>,
    pub(super) server_port: u16,
    /// For `restart`: the shell command that restarts the store.
    pub(super) restart_cmd: Option<&'a str>,
    /// For `partition`: the shell command that splits the store's cluster and joins it.
    pub(super) partition_cmd: Option<&'a str>,
    /// For `clock-jump`: the servers' wall-clock offset file.
    pub(super) clock_file: Option<&'a Path>,
    /// For `failover`: the Sentinel group, and how many failovers end the phase (else as many
    /// as fit in it).
    pub(super) group: Option<Group>,
    pub(super) failovers: Option<usize>,
    pub(super) end_ns: u64,
    pub(super) progress: &'a Progress,
}

impl Driver<'_> {
    /// Injects the fault again and again, leaving a lease of calm between two, until the phase
    /// ends; returns what it injected.
    pub(super) async fn run(&mut self, dir: &Path) -> Result<Vec<Injected>> {
        let random = Random::default();
        let mut injected = Vec::new();
        let ticker = self.tick_progress();
        // Let the workers get going first.
        self.sleep(self.lease / 2).await;
        // At least one fault, however short the phase; more while one more fits.
        loop {
            let hit = match self.fault {
                FaultKind::Kill | FaultKind::Stop | FaultKind::SessionKill => {
                    let first = random.below(self.pool.len() as u64) as usize;
                    self.hit_holder(first, dir).await?
                }
                FaultKind::ClockJump | FaultKind::Restart => {
                    self.pool.ready_newcomer(dir).await?;
                    let first = random.below(self.pool.len() as u64) as usize;
                    let hit = self.hit_holder(first, dir).await?;
                    // Started in any case (a newcomer no holder was found for is one more
                    // worker), so none is left waiting for a start time.
                    self.pool.start_newcomer().await?;
                    hit
                }
                FaultKind::Delay | FaultKind::Blackhole | FaultKind::Reset => {
                    Some(self.disturb_traffic().await)
                }
                FaultKind::Minority => Some(self.cut_off_minority(&random).await),
                FaultKind::Partition => Some(self.partition(dir).await?),
                FaultKind::Failover => {
                    let group = self.group.as_mut().context("failover without its group")?;
                    let hit = group.fail_over(&random, &self.pool).await?;
                    tracing::info!(
                        "failover {} done in {} ms",
                        injected.len() + 1,
                        (hit.until_ns - hit.at_ns) / 1_000_000
                    );
                    Some(hit)
                }
            };
            injected.extend(hit);
            if self.failovers.is_some_and(|n| injected.len() >= n) {
                break;
            }
            // Calm between faults: the lease, so a freed lock is taken again first (a failover
            // frees nothing, and its group is whole again when it returns).
            let calm = match self.fault {
                FaultKind::Failover => self.lease / 4 + random.up_to(self.lease / 8),
                _ => self.lease + random.up_to(self.lease / 2),
            };
            self.sleep(calm).await;
            if monotonic_ns() + self.longest().as_nanos() as u64 > self.end_ns {
                break;
            }
        }
        ticker.abort();
        Ok(injected)
    }

    /// The longest a fault lasts, with the calm after it.
    fn longest(&self) -> Duration {
        if self.fault == FaultKind::Failover {
            return failover::LONGEST;
        }
        (self.lease * 4).max(self.stop_for + self.lease * 3 / 2)
    }

    /// Finds a holder, trying the processes in turn from `first` on (for up to two leases:
    /// between two holds nobody holds for a moment, and a slow store or a loaded machine may
    /// leave the lock free for a while), and kills or stops it. `None` if no process held at
    /// the moments looked at.
    async fn hit_holder(&mut self, first: usize, dir: &Path) -> Result<Option<Injected>> {
        let give_up = tokio::time::Instant::now() + (self.lease * 2).max(Duration::from_secs(1));
        for i in 0.. {
            if i > 0 && i % self.pool.len() == 0 {
                if tokio::time::Instant::now() >= give_up {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let process = (first + i) % self.pool.len();
            // The fault begins with the SIGSTOP: from then on the process may renew nothing,
            // however long its threads take to stop (one in the middle of a write to disk) or
            // this driver, on a loaded machine, takes to see it.
            let at_ns = monotonic_ns();
            self.pool.stop(process).await?;
            if !self.pool.holds(process)? {
                self.pool.signal(process, libc::SIGCONT)?;
                continue;
            }
            match self.fault {
                FaultKind::Kill => self.pool.kill_and_restart(process, dir).await?,
                FaultKind::SessionKill => {
                    let pid = self.pool.pid(process)?;
                    if let Some(killer) = self.killer.as_mut() {
                        killer.end_sessions_of(pid, self.server_port).await?;
                    }
                    // Stopped a moment longer, so another worker takes a freed session lock
                    // before the holder runs on believing it holds.
                    tokio::time::sleep(self.lease / 2).await;
                    self.pool.signal(process, libc::SIGCONT)?;
                }
                FaultKind::ClockJump | FaultKind::Restart => {
                    let stopped = tokio::time::Instant::now();
                    if self.fault == FaultKind::ClockJump {
                        let file = self.clock_file.context("clock-jump without --clock-file")?;
                        distlock_harness::faults::clock::jump_forward(file, self.lease * 2)
                            .with_context(|| format!("jumping the clock in {}", file.display()))?;
                    } else {
                        self.restart_store(dir).await?;
                    }
                    // A newcomer asks for the lock while the holder is stopped for half a
                    // lease: short of the lease it took moments ago (holds last a twentieth of
                    // one, renewals come every third), so had the store kept the holding and
                    // its clock, the lock would still be the holder's, and a second holder
                    // meanwhile is the jump's (the restart's) doing.
                    self.pool.start_newcomer().await?;
                    tokio::time::sleep_until(stopped + self.lease / 2).await;
                    self.pool.signal(process, libc::SIGCONT)?;
                }
                _ => {
                    // Past its lease (or session), so that another worker takes the lock.
                    tokio::time::sleep(self.stop_for).await;
                    self.pool.signal(process, libc::SIGCONT)?;
                }
            }
            return Ok(Some(Injected {
                at_ns,
                until_ns: monotonic_ns(),
                process: Some(process),
            }));
        }
        Ok(None)
    }

    /// Runs the restart command, its output into `dir`; a command that fails ends the run.
    async fn restart_store(&self, dir: &Path) -> Result<()> {
        let command = self.restart_cmd.context("restart without --restart-cmd")?;
        run_command("--restart-cmd", command, &[], &dir.join("restart.log")).await
    }

    /// Splits the store's cluster with the partition command for three leases (long enough
    /// that a holder whose lease or session depended on the cut-off side would have lost it),
    /// then joins it again.
    async fn partition(&self, dir: &Path) -> Result<Injected> {
        let command = self
            .partition_cmd
            .context("partition without --partition-cmd")?;
        let log = dir.join("partition.log");
        let at_ns = monotonic_ns();
        run_command("--partition-cmd", command, &[(PARTITION, "cut")], &log).await?;
        tokio::time::sleep(self.lease * 3).await;
        run_command("--partition-cmd", command, &[(PARTITION, "heal")], &log).await?;
        Ok(Injected {
            at_ns,
            until_ns: monotonic_ns(),
            process: None,
        })
    }

    /// Puts the proxies' fault on for a while, then passes traffic again.
    async fn disturb_traffic(&self) -> Injected {
        let (fault, lasting) = match self.fault {
            FaultKind::Delay => (
                Fault::Delay {
                    delay: self.lease / 4,
                    jitter: self.lease / 8,
                },
                self.lease * 2,
            ),
            FaultKind::Blackhole => (Fault::Blackhole, self.lease * 2),
            _ => (Fault::Reset, self.lease / 5),
        };
        let at_ns = monotonic_ns();
        for proxy in self.proxies {
            proxy.set(fault);
        }
        tokio::time::sleep(lasting).await;
        for proxy in self.proxies {
            proxy.set(Fault::Pass);
        }
        Injected {
            at_ns,
            until_ns: monotonic_ns(),
            process: None,
        }
    }

    /// Blackholes the proxies of a minority of the servers, chosen at random, for three leases:
    /// long enough that a holder whose lease or session depended on them would have lost it.
    async fn cut_off_minority(&self, random: &Random) -> Injected {
        let mut order: Vec<&FaultProxy> = self.proxies.iter().collect();
        for i in (1..order.len()).rev() {
            order.swap(i, random.below(i as u64 + 1) as usize);
        }
        let cut = &order[..(self.proxies.len() - 1) / 2];
        let at_ns = monotonic_ns();
        for proxy in cut {
            proxy.set(Fault::Blackhole);
        }
        tokio::time::sleep(self.lease * 3).await;
        for proxy in cut {
            proxy.set(Fault::Pass);
        }
        Injected {
            at_ns,
            until_ns: monotonic_ns(),
            process: None,
        }
    }

    /// Sleeps `d`, or until the phase's end.
    async fn sleep(&self, d: Duration) {
        let until = (monotonic_ns() + d.as_nanos() as u64).min(self.end_ns);
        processes::sleep_until_ns(until).await;
    }

    /// Moves the progress bar on by a second each second of the phase.
    fn tick_progress(&self) -> tokio::task::JoinHandle<()> {
        let counter = self.progress.counter();
        let seconds = Duration::from_nanos(self.end_ns.saturating_sub(monotonic_ns())).as_secs();
        tokio::spawn(async move {
            for _ in 0..seconds {
                tokio::time::sleep(Duration::from_secs(1)).await;
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })
    }
}

/// The variable that tells `--partition-cmd` what to do: `cut` or `heal`.
const PARTITION: &str = "DISTLOCK_PARTITION";

/// Runs the shell command `command` (the option `what`) with `env`, its output appended to
/// `log`; a command that fails ends the run, with the end of its output.
async fn run_command(what: &str, command: &str, env: &[(&str, &str)], log: &Path) -> Result<()> {
    let output = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let status = tokio::process::Command::new("sh")
        .args(["-c", command])
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(output.try_clone()?)
        .stderr(output)
        .status()
        .await
        .with_context(|| format!("running {what}"))?;
    if !status.success() {
        // The phase's directory goes with the run: show the output's end here.
        let output = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = output.lines().rev().take(10).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!("{what} failed ({status}): {}", tail.join(" / "));
    }
    Ok(())
}
