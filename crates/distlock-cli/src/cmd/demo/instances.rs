//! Starting and stopping the K instances of the service, each its own OS process.
//!
//! An instance that fails to start, crashes or will not stop is reported with the tail of its
//! stderr, never hidden.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use super::service::{LOCK_URL_ENV, READY_PREFIX, STORE_ENV, ServeArgs};
use super::strategy::Settings;

/// How long an instance may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an instance may take to exit once its stdin is closed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines of each instance's stderr kept for reports.
const STDERR_LINES: usize = 20;

/// A problem with one instance, with what it printed on stderr.
#[derive(Debug, Clone)]
pub(crate) struct InstanceProblem {
    pub(crate) instance: u32,
    pub(crate) what: String,
    pub(crate) stderr: Vec<String>,
}

impl std::fmt::Display for InstanceProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "instance {} {}", self.instance, self.what)?;
        if self.stderr.is_empty() {
            write!(f, " (its stderr was empty)")
        } else {
            write!(f, "; its stderr ends with:")?;
            for line in &self.stderr {
                write!(f, "\n    {line}")?;
            }
            Ok(())
        }
    }
}

/// The running instances of one run.
pub(crate) struct Instances {
    running: Vec<Instance>,
}

struct Instance {
    number: u32,
    child: Child,
    /// Closing it tells the instance to exit.
    stdin: Option<ChildStdin>,
    addr: SocketAddr,
    stderr: StderrTail,
}

/// The last lines an instance wrote on stderr, and how many there were in all.
#[derive(Clone, Default)]
struct StderrTail(Arc<Mutex<(VecDeque<String>, u64)>>);

impl StderrTail {
    fn push(&self, line: String) {
        let mut tail = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if tail.0.len() == STDERR_LINES {
            tail.0.pop_front();
        }
        tail.0.push_back(line);
        tail.1 += 1;
    }

    fn lines(&self) -> Vec<String> {
        let tail = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut lines: Vec<String> = tail.0.iter().cloned().collect();
        let dropped = tail.1.saturating_sub(tail.0.len() as u64);
        if dropped > 0 {
            lines.insert(0, format!("[{dropped} earlier lines not shown]"));
        }
        lines
    }
}

impl Instances {
    /// Starts `count` instances with `settings` (numbered 1 ..= count) and waits until each
    /// listens. On any failure the ones started are stopped and every problem is returned.
    pub(crate) async fn start(
        count: u32,
        settings: &Settings,
        store_url: &str,
        lock_url: Option<&str>,
    ) -> Result<Instances, Vec<InstanceProblem>> {
        let exe = match std::env::current_exe() {
            Ok(exe) => exe,
            Err(e) => {
                return Err(vec![InstanceProblem {
                    instance: 0,
                    what: format!("cannot be started: the distlock binary's path is unknown ({e})"),
                    stderr: Vec::new(),
                }]);
            }
        };
        let starting = (1..=count).map(|number| {
            let mut settings = *settings;
            settings.instance = number;
            let mut command = Command::new(&exe);
            command
                .args(ServeArgs::command_line(&settings))
                .env(STORE_ENV, store_url)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            match lock_url {
                Some(url) => command.env(LOCK_URL_ENV, url),
                None => command.env_remove(LOCK_URL_ENV),
            };
            start_one(number, command)
        });
        let results = futures_util::future::join_all(starting).await;
        let mut running = Vec::new();
        let mut problems = Vec::new();
        for r in results {
            match r {
                Ok(instance) => running.push(instance),
                Err(problem) => problems.push(problem),
            }
        }
        if problems.is_empty() {
            Ok(Instances { running })
        } else {
            Instances { running }.stop().await;
            Err(problems)
        }
    }

    /// Each instance's address, in instance order.
    pub(crate) fn addrs(&self) -> Vec<SocketAddr> {
        self.running.iter().map(|i| i.addr).collect()
    }

    /// The process id of instance `number` (1 ..= K), while it runs.
    pub(crate) fn pid(&self, number: u32) -> Option<u32> {
        let instance = self.running.iter().find(|i| i.number == number)?;
        instance.child.id()
    }

    /// Instances that have exited while they should be serving.
    pub(crate) fn crashed(&mut self) -> Vec<InstanceProblem> {
        let mut problems = Vec::new();
        for instance in &mut self.running {
            if let Ok(Some(status)) = instance.child.try_wait() {
                problems.push(instance.problem(format!("exited while serving ({status})")));
            }
        }
        problems
    }

    /// Stops every instance (closes its stdin; kills it if it does not exit in time). Returns
    /// the instances that crashed, failed or had to be killed.
    pub(crate) async fn stop(self) -> Vec<InstanceProblem> {
        let stops = self.running.into_iter().map(Instance::stop);
        futures_util::future::join_all(stops)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

async fn start_one(number: u32, mut command: Command) -> Result<Instance, InstanceProblem> {
    let stderr = StderrTail::default();
    let problem = |what: String, stderr: &StderrTail| InstanceProblem {
        instance: number,
        what,
        stderr: stderr.lines(),
    };
    let mut child = command
        .spawn()
        .map_err(|e| problem(format!("cannot be started: {e}"), &stderr))?;
    if let Some(err) = child.stderr.take() {
        let tail = stderr.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(err).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tail.push(line);
            }
        });
    }
    let stdin = child.stdin.take();
    let Some(out) = child.stdout.take() else {
        return Err(problem("has no stdout".into(), &stderr));
    };
    let mut lines = BufReader::new(out).lines();
    let first = tokio::time::timeout(START_TIMEOUT, lines.next_line()).await;
    let addr = match first {
        Ok(Ok(Some(line))) => line
            .strip_prefix(READY_PREFIX)
            .and_then(|a| a.trim().parse::<SocketAddr>().ok()),
        _ => None,
    };
    let Some(addr) = addr else {
        let what = match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
            Ok(Ok(status)) => format!("failed to start ({status})"),
            _ => {
                let _ = child.kill().await;
                format!("did not listen within {START_TIMEOUT:?}; killed")
            }
        };
        // Let the stderr reader catch the last lines.
        tokio::time::sleep(Duration::from_millis(50)).await;
        return Err(problem(what, &stderr));
    };
    Ok(Instance {
        number,
        child,
        stdin,
        addr,
        stderr,
    })
}

impl Instance {
    fn problem(&self, what: String) -> InstanceProblem {
        InstanceProblem {
            instance: self.number,
            what,
            stderr: self.stderr.lines(),
        }
    }

    async fn stop(mut self) -> Option<InstanceProblem> {
        drop(self.stdin.take());
        let what = match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
            Ok(Ok(status)) if status.success() => None,
            Ok(Ok(status)) => Some(format!("ended badly ({status})")),
            Ok(Err(e)) => Some(format!("could not be waited for: {e}")),
            Err(_) => {
                let _ = self.child.kill().await;
                Some(format!("did not stop within {STOP_TIMEOUT:?}; killed"))
            }
        };
        // Let the stderr reader catch the last lines.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let printed = self.stderr.0.lock().map_or(0, |t| t.1);
        let what = match what {
            None if printed > 0 => Some(format!("printed {printed} error lines")),
            other => other,
        };
        what.map(|w| self.problem(w))
    }
}
