//! Holder processes for the cases that need real OS processes: separate address spaces for
//! mutual exclusion, SIGKILL for crashes, SIGSTOP for pauses.
//!
//! A child is the test binary itself, started again with [`CHILD_ENV`] set to a JSON [`Spec`];
//! [`crate::Suite::run`] sees the variable and runs the role instead of the tests. The child
//! reports events as JSON lines on stdout and takes commands as lines on stdin.
//!
//! A test file on libtest's own harness (no `main` of its own) starts its children with
//! [`ChildProcess::spawn_test`] instead: the child runs just the named test, which calls
//! [`run_if_child`] first.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use distlock::ErrorKind;
use futures_util::FutureExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::fenced::FencedFile;
use crate::flavour::Flavour;
use crate::{Failure, monotonic_ns};

/// The environment variable that turns the test binary into a child holder.
pub const CHILD_ENV: &str = "DISTLOCK_TESTKIT_CHILD";

/// What a child process is asked to do.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Spec {
    /// The store.
    pub url: String,
    /// Which flavour of lock (a [`Flavour`] name of the suite).
    pub flavour: String,
    /// The job.
    pub role: Role,
}

/// A child's job.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Role {
    /// `tasks` tasks each do `iterations` times: lock, read the counter file, write it + 1, unlock.
    Counter {
        /// Lock name.
        name: String,
        /// The shared counter, a file outside the lock store.
        counter: PathBuf,
        /// Concurrent tasks in this process.
        tasks: u32,
        /// Acquisitions per task.
        iterations: u32,
    },
    /// Take the lock, report the token, then obey commands: `write PATH`, `lost MS`, `check`
    /// (answer at once what the guard knows: `is_lost()`, and whether `lost()` is ready),
    /// `release`.
    Hold {
        /// Lock name.
        name: String,
        /// Lease in milliseconds (renewed by the watchdog).
        lease_ms: u64,
    },
    /// Take the lock with the default lease, report `acquired` (token), then let go of the guard
    /// without releasing it, as `how` says, and return from `main` at once: no
    /// `Client::shutdown`, the runtime is dropped with whatever it still has queued.
    DropAndExit {
        /// Lock name.
        name: String,
        /// Where the guard is dropped.
        how: DropPath,
    },
    /// Acquire and release `acquisitions` times, reporting (start ns, end ns, token) per hold.
    Record {
        /// Lock name.
        name: String,
        /// How many holds.
        acquisitions: u32,
    },
    /// `campaigners` tasks each campaign in election `election` over and over, lead for
    /// `hold_ms`, and resign, until the process is killed. Each leadership is reported when it
    /// starts (`lead`: term, start ns, value) and when it ends (`resigned`: term, end ns, and
    /// `held`: whether it was still leader up to the end, as far as the leader could tell).
    Campaign {
        /// Election name.
        election: String,
        /// Campaigning tasks in this process.
        campaigners: u32,
        /// The election's lease in milliseconds.
        lease_ms: u64,
        /// How long each leadership lasts before resigning.
        hold_ms: u64,
        /// Every `long_every`-th leadership of this process (0: none) lasts `long_hold_ms`
        /// instead, and says so in its `lead` event (`long`): a leader the test can be sure to
        /// find still leading when it kills or stops the process.
        long_every: u32,
        /// How long a long leadership lasts.
        long_hold_ms: u64,
        /// This process's number, part of each campaigner's value (`p{process}-t{task}`).
        process: u32,
    },
    /// Follow election `election` and report every leader seen (`leader`: term, value).
    Observe {
        /// Election name.
        election: String,
    },
    /// `waiters` tasks wait on latch `latch` (each at most `timeout_ms`) once `waiting` has been
    /// reported; each reports `released` (ns) or fails.
    LatchWait {
        /// Latch name.
        latch: String,
        /// Waiting tasks in this process.
        waiters: u32,
        /// Each waiter's timeout.
        timeout_ms: u64,
    },
    /// Count latch `latch` down once, reporting `counted` (the count after, and `sent`: ns just
    /// before the request).
    LatchCountDown {
        /// Latch name.
        latch: String,
    },
    /// Set latch `latch` to `count`, report `set` (whether it was set), then wait to be killed.
    LatchSet {
        /// Latch name.
        latch: String,
        /// The count.
        count: u64,
    },
}

/// Where a [`Role::DropAndExit`] child drops its guard before `main` returns.
#[derive(Serialize, Deserialize, Debug, Clone, Copy)]
#[serde(rename_all = "snake_case")]
pub enum DropPath {
    /// An early return (as a `?` does) out of the function holding the guard.
    EarlyReturn,
    /// A spawned task that panics while holding it.
    PanickedTask,
    /// A plain thread outside the runtime, which the guard was moved to.
    PlainThread,
    /// An early return in a program whose runtime is a current-thread one
    /// (`#[tokio::main(flavor = "current_thread")]`).
    CurrentThreadMain,
}

/// A running child, seen from the test.
pub struct ChildProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    /// Started under libtest's harness, which writes lines of its own on stdout (`running 1
    /// test`, `test NAME ... ` before the child's first event): events are read from the first
    /// `{` of a line, and lines without one are skipped.
    under_libtest: bool,
}

impl ChildProcess {
    /// Starts this test binary again as a child doing `spec`.
    pub fn spawn(spec: &Spec) -> Result<Self, Failure> {
        Self::start(spec, &[])
    }

    /// Starts this test binary again, a test file on libtest's harness, running only the test
    /// `test` (which calls [`run_if_child`] first) as a child doing `spec`.
    pub fn spawn_test(spec: &Spec, test: &str) -> Result<Self, Failure> {
        Self::start(spec, &[test, "--exact", "--nocapture", "--test-threads=1"])
    }

    fn start(spec: &Spec, args: &[&str]) -> Result<Self, Failure> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .args(args)
            .env(CHILD_ENV, serde_json::to_string(spec)?)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or(Failure("no stdin".into()))?;
        let stdout = child.stdout.take().ok_or(Failure("no stdout".into()))?;
        Ok(ChildProcess {
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
            under_libtest: !args.is_empty(),
        })
    }

    /// The child's next event, waiting at most `within`.
    pub async fn event(&mut self, within: Duration) -> Result<Value, Failure> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.stdout.next_line()).await {
                Err(_) => return Err(Failure(format!("child sent nothing within {within:?}"))),
                Ok(Err(e)) => return Err(e.into()),
                Ok(Ok(None)) => return Err(Failure("child exited without a report".into())),
                Ok(Ok(Some(line))) => {
                    let line = match line.find('{') {
                        Some(at) if self.under_libtest => &line[at..],
                        // libtest's own line.
                        None if self.under_libtest => continue,
                        _ => &line[..],
                    };
                    let v: Value = serde_json::from_str(line)?;
                    if v["event"] == "error" {
                        return Err(Failure(format!("child failed: {}", v["message"])));
                    }
                    return Ok(v);
                }
            }
        }
    }

    /// Sends the command line `command` and answers the child's next event, waiting at most
    /// `within`.
    pub async fn ask(&mut self, command: &str, within: Duration) -> Result<Value, Failure> {
        self.send(command).await?;
        self.event(within).await
    }

    /// Sends a command line.
    pub async fn send(&mut self, command: &str) -> Result<(), Failure> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// The child's process id, while it has not been reaped.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends `sig` to the child.
    pub fn signal(&self, sig: i32) -> Result<(), Failure> {
        let pid = self
            .child
            .id()
            .ok_or(Failure("child already reaped".into()))?;
        // SAFETY: kill(2) on our own child, which has not been reaped.
        if unsafe { libc::kill(pid as libc::pid_t, sig) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(())
    }

    /// Waits for the child to exit and checks it succeeded.
    pub async fn finish(mut self, within: Duration) -> Result<(), Failure> {
        drop(self.stdin);
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .map_err(|_| Failure(format!("child still running after {within:?}")))??;
        if !status.success() {
            return Err(Failure(format!("child exited with {status}")));
        }
        Ok(())
    }
}

/// For a test file on libtest's harness: the body of the (plain, not async) test that
/// [`ChildProcess::spawn_test`] names. In a child process it runs the role of its spec with
/// `flavours` and exits the process with the outcome; elsewhere it returns at once.
pub fn run_if_child(flavours: &[Flavour]) {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let code = match serde_json::from_str::<Spec>(&spec) {
        Ok(spec) => match child_main(spec, flavours) {
            code if code == std::process::ExitCode::SUCCESS => 0,
            _ => 1,
        },
        Err(e) => {
            eprintln!("bad {CHILD_ENV}: {e}");
            2
        }
    };
    // Before libtest prints its verdict: the child's stdout carries events only.
    std::process::exit(code);
}

/// Runs the role in `spec` (called in the child process). Every failure is reported as an
/// `error` event and a non-zero exit.
pub fn child_main(spec: Spec, flavours: &[Flavour]) -> std::process::ExitCode {
    let current_thread = matches!(
        spec.role,
        Role::DropAndExit {
            how: DropPath::CurrentThreadMain,
            ..
        }
    );
    let runtime = if current_thread {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    }
    .expect("child runtime");
    let outcome = runtime.block_on(async {
        let flavour = flavours
            .iter()
            .find(|f| f.name == spec.flavour)
            .ok_or_else(|| Failure(format!("no flavour {}", spec.flavour)))?;
        let client = distlock::connect(&spec.url).await?;
        run_role(&client, flavour, spec.role).await
    });
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(Failure(message)) => {
            say(json!({"event": "error", "message": message}));
            std::process::ExitCode::FAILURE
        }
    }
}

fn say(v: Value) {
    println!("{v}");
}

async fn run_role(client: &distlock::Client, flavour: &Flavour, role: Role) -> Result<(), Failure> {
    match role {
        Role::Counter {
            name,
            counter,
            tasks,
            iterations,
        } => {
            let mut workers = Vec::new();
            for _ in 0..tasks {
                let lock = (flavour.make)(client, &name);
                let counter = counter.clone();
                workers.push(tokio::spawn(async move {
                    for _ in 0..iterations {
                        let guard = lock.acquire().await?;
                        increment_slowly(&counter).await?;
                        guard.release().await?;
                    }
                    Ok::<(), Failure>(())
                }));
            }
            for w in workers {
                w.await.map_err(|e| Failure(e.to_string()))??;
            }
            say(json!({"event": "done"}));
        }
        Role::Hold { name, lease_ms } => {
            let lock = crate::flavour::with_lease(
                client,
                (flavour.make)(client, &name),
                Duration::from_millis(lease_ms),
            );
            let guard = lock.acquire().await?;
            let token = guard.fencing_token().get();
            say(json!({"event": "acquired", "token": token}));
            let mut commands = BufReader::new(tokio::io::stdin()).lines();
            while let Some(line) = commands.next_line().await? {
                let (verb, arg) = line.split_once(' ').unwrap_or((line.as_str(), ""));
                match verb {
                    "write" => {
                        let accepted = FencedFile::new(arg).write(token)?;
                        say(json!({"event": "write", "accepted": accepted}));
                    }
                    "lost" => {
                        let wait = Duration::from_millis(arg.parse().unwrap_or(0));
                        let lost = tokio::time::timeout(wait, guard.lost()).await.is_ok();
                        say(json!({"event": "lost", "lost": lost}));
                    }
                    "check" => {
                        let is_lost = guard.is_lost();
                        let lost_ready = guard.lost().now_or_never().is_some();
                        say(
                            json!({"event": "check", "is_lost": is_lost, "lost_ready": lost_ready}),
                        );
                    }
                    "release" => {
                        let held = guard.release().await?;
                        say(json!({"event": "released", "held": held}));
                        return Ok(());
                    }
                    other => return Err(Failure(format!("unknown command {other:?}"))),
                }
            }
        }
        Role::DropAndExit { name, how } => {
            let lock = (flavour.make)(client, &name);
            let guard = lock.acquire().await?;
            say(json!({"event": "acquired", "token": guard.fencing_token().get()}));
            match how {
                DropPath::EarlyReturn | DropPath::CurrentThreadMain => return Ok(()),
                DropPath::PanickedTask => {
                    let task = tokio::spawn(async move {
                        let _held = guard;
                        panic!("a task panicking while it holds a guard (expected by the test)");
                    });
                    let _ = task.await;
                }
                DropPath::PlainThread => {
                    std::thread::spawn(move || drop(guard))
                        .join()
                        .map_err(|_| Failure("the plain thread panicked".into()))?;
                }
            }
        }
        Role::Record { name, acquisitions } => {
            let lock = (flavour.make)(client, &name);
            let mut holds = Vec::with_capacity(acquisitions as usize);
            for _ in 0..acquisitions {
                let guard = lock.acquire().await?;
                let start = monotonic_ns();
                let token = guard.fencing_token().get();
                let end = monotonic_ns();
                guard.release().await?;
                holds.push([start, end, token]);
            }
            say(json!({"event": "records", "holds": holds}));
        }
        Role::Campaign {
            election,
            campaigners,
            lease_ms,
            hold_ms,
            long_every,
            long_hold_ms,
            process,
        } => {
            let leaderships = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
            let mut tasks = Vec::new();
            for task in 0..campaigners {
                let leaderships = leaderships.clone();
                let election = client.election(&election);
                let keepable = client.keepable_lease(Duration::from_millis(lease_ms));
                let election = match keepable {
                    Some(lease) => election.lease(lease),
                    None => election,
                };
                let value = format!("p{process}-t{task}");
                tasks.push(tokio::spawn(async move {
                    loop {
                        // A store error that may pass (a connection refused by a server at its
                        // client limit, a timeout on an overloaded machine) costs a turn, not the
                        // process: it is reported, and counted by the test. So does a session
                        // that ended while it waited (the process was stopped past it): its place
                        // in the queue went with the session.
                        let leadership = match election.campaign(value.clone()).await {
                            Ok(leadership) => leadership,
                            Err(e) if e.is_retryable() || e.kind() == ErrorKind::LeaseLost => {
                                say(json!({"event": "retry", "error": e.to_string()}));
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                continue;
                            }
                            Err(e) => return Err(e.into()),
                        };
                        let start = monotonic_ns();
                        let term = leadership.term().get();
                        let nth = leaderships.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                        let long = long_every > 0 && nth.is_multiple_of(long_every);
                        say(json!({
                            "event": "lead", "term": term, "start": start, "value": value,
                            "long": long,
                        }));
                        let hold = if long { long_hold_ms } else { hold_ms };
                        let until = tokio::time::Instant::now() + Duration::from_millis(hold);
                        let lost = leadership.lost();
                        let _ = tokio::time::timeout_at(until, lost).await;
                        let end = monotonic_ns();
                        // Judged after taking the time: a leader that knows it is still leader
                        // now was leader up to `end`.
                        let still = !leadership.is_lost();
                        let resigned = match leadership.resign().await {
                            Ok(resigned) => resigned,
                            // Not known to have held to the end: only its start counts.
                            Err(e) if e.is_retryable() || e.kind() == ErrorKind::LeaseLost => {
                                say(json!({"event": "retry", "error": e.to_string()}));
                                false
                            }
                            Err(e) => return Err(e.into()),
                        };
                        say(json!({
                            "event": "resigned", "term": term, "end": end,
                            "held": still && resigned,
                        }));
                    }
                    #[allow(unreachable_code)]
                    Ok::<(), Failure>(())
                }));
            }
            for t in tasks {
                t.await.map_err(|e| Failure(e.to_string()))??;
            }
        }
        Role::Observe { election } => {
            use futures_util::StreamExt;
            let mut leaders = Box::pin(client.election(&election).observe().await?);
            say(json!({"event": "observing"}));
            while let Some(leader) = leaders.next().await {
                let leader = match leader {
                    Ok(leader) => leader,
                    // The stream goes on after a store error; terms it then misses are caught up
                    // from the store's log (and the test reports any it never saw).
                    Err(e) if e.is_retryable() => {
                        say(json!({"event": "retry", "error": e.to_string()}));
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                say(json!({"event": "leader", "term": leader.term.get(), "value": leader.value}));
            }
        }
        Role::LatchWait {
            latch,
            waiters,
            timeout_ms,
        } => {
            let mut tasks = Vec::new();
            let (ready, mut all_ready) = tokio::sync::mpsc::channel::<()>(waiters as usize);
            for _ in 0..waiters {
                let latch = client.latch(&latch);
                let ready = ready.clone();
                tasks.push(tokio::spawn(async move {
                    let _ = ready.send(()).await;
                    drop(ready);
                    latch
                        .wait_timeout(Duration::from_millis(timeout_ms))
                        .await?;
                    say(json!({"event": "released", "at": monotonic_ns()}));
                    Ok::<(), Failure>(())
                }));
            }
            drop(ready);
            while all_ready.recv().await.is_some() {}
            say(json!({"event": "waiting"}));
            for t in tasks {
                t.await.map_err(|e| Failure(e.to_string()))??;
            }
        }
        Role::LatchCountDown { latch } => {
            let latch = client.latch(&latch);
            let sent = monotonic_ns();
            let after = latch.count_down().await?;
            say(json!({"event": "counted", "after": after, "sent": sent}));
        }
        Role::LatchSet { latch, count } => {
            let set = client.latch(&latch).try_set_count(count).await?;
            say(json!({"event": "set", "set": set}));
            std::future::pending::<()>().await;
        }
    }
    Ok(())
}

/// Read, pause, write: a read-modify-write that loses updates unless a lock serialises it.
pub async fn increment_slowly(counter: &std::path::Path) -> Result<(), Failure> {
    let text = tokio::fs::read_to_string(counter).await.unwrap_or_default();
    let value: u64 = text.trim().parse().unwrap_or(0);
    // Widen the race window: without mutual exclusion another writer gets in here.
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_micros(200)).await;
    tokio::fs::write(counter, (value + 1).to_string()).await?;
    Ok(())
}
