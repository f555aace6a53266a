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
use distlock_testkit::faults::random::Random;
use distlock_testkit::faults::{Fault, FaultProxy};
use distlock_testkit::monotonic_ns;

use super::events::{self, Event, Injected};
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
}

impl Pool {
    pub(super) fn new(processes: usize) -> Self {
        Pool {
            slots: Vec::with_capacity(processes),
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

    /// Sends `sig` to process `process` if it runs.
    fn signal(&self, process: usize, sig: i32) -> Result<()> {
        let Some(pid) = self.slots[process]
            .running
            .as_ref()
            .and_then(|w| w.child.id())
        else {
            bail!("worker process {process} is not running");
        };
        // SAFETY: kill(2) on our own child, which has not been reaped (we hold its handle).
        if unsafe { libc::kill(pid as libc::pid_t, sig) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("signalling worker process {process}"));
        }
        Ok(())
    }

    /// Whether the (stopped) process `process` holds the lock, by its current log.
    fn holds(&self, process: usize) -> Result<bool> {
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

    /// Waits for every process to end (they stop at `end_ns`, and a call in flight may take up
    /// to a few leases); kills any still running well after. Returns every log's events.
    pub(super) async fn finish(mut self, end_ns: u64, lease: Duration) -> Result<Vec<Vec<Event>>> {
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
        for slot in &self.slots {
            for log in &slot.logs {
                logs.push(events::read(log)?);
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
    pub(super) pool: Pool,
    pub(super) proxy: Option<&'a FaultProxy>,
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
                FaultKind::Kill | FaultKind::Stop => {
                    let first = random.below(self.pool.len() as u64) as usize;
                    self.hit_holder(first, dir).await?
                }
                FaultKind::Delay | FaultKind::Blackhole | FaultKind::Reset => {
                    Some(self.disturb_traffic().await)
                }
            };
            injected.extend(hit);
            // Calm between faults: the lease, so a freed lock is taken again first.
            self.sleep(self.lease + random.up_to(self.lease / 2)).await;
            if monotonic_ns() + self.longest().as_nanos() as u64 > self.end_ns {
                break;
            }
        }
        ticker.abort();
        Ok(injected)
    }

    /// The longest a fault lasts, with the calm after it.
    fn longest(&self) -> Duration {
        self.lease * 4
    }

    /// Finds a holder, trying the processes in turn from `first` on (a few rounds: between two
    /// holds nobody holds for a moment), and kills or stops it. `None` if no process held at
    /// the moments looked at.
    async fn hit_holder(&mut self, first: usize, dir: &Path) -> Result<Option<Injected>> {
        for i in 0..self.pool.len() * 20 {
            if i > 0 && i % self.pool.len() == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let process = (first + i) % self.pool.len();
            self.pool.signal(process, libc::SIGSTOP)?;
            let at_ns = monotonic_ns();
            if !self.pool.holds(process)? {
                self.pool.signal(process, libc::SIGCONT)?;
                continue;
            }
            match self.fault {
                FaultKind::Kill => self.pool.kill_and_restart(process, dir).await?,
                _ => {
                    // Past its lease, so that another worker takes the lock meanwhile.
                    tokio::time::sleep(self.lease * 5 / 2).await;
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

    /// Puts the proxy's fault on for a while, then passes traffic again.
    async fn disturb_traffic(&self) -> Injected {
        let proxy = self.proxy.expect("proxy faults run with a proxy");
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
        proxy.set(fault);
        tokio::time::sleep(lasting).await;
        proxy.set(Fault::Pass);
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
