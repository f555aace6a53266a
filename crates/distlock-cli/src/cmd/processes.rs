//! The process structure `distlock bench` and `distlock torture` share: the parent starts copies
//! of its own executable as children (`<subcommand> --child JOB`), each child connects and says
//! "ready", and the parent gives them all one start time on CLOCK_MONOTONIC (shared by every
//! process on the machine), so they run over the same window and their records share one clock.

use std::process::{ExitCode, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use distlock_harness::monotonic_ns;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Checks `1 <= processes <= workers`; otherwise says so for `command` and gives the usage exit.
pub(crate) fn check_spread(command: &str, workers: usize, processes: usize) -> Option<ExitCode> {
    if workers == 0 || processes == 0 || processes > workers {
        eprintln!(
            "distlock {command}: need 1 <= processes <= workers (got {workers} workers over \
             {processes} processes)"
        );
        return Some(ExitCode::from(crate::EXIT_USAGE));
    }
    None
}

/// How many of `workers` process number `process` of `processes` runs (spread evenly).
pub(crate) fn share(workers: usize, processes: usize, process: usize) -> usize {
    workers / processes + usize::from(process < workers % processes)
}

/// The exit of a parent's or child's run of `command`: its own, or the error's chain said on
/// stderr and 1.
pub(crate) fn exit_with(command: &str, outcome: Result<ExitCode>) -> ExitCode {
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("distlock {command}: {}", distlock::error::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// Connects once, to fail early with the store's own message (which names the store and the
/// redacted URL) if the URL is wrong or the store is down; returns the client.
pub(crate) async fn probe(url: &str) -> Result<distlock::Client> {
    Ok(distlock::connect(url).await?)
}

/// A child process as the parent sees it: its stdin takes the start time, its stdout says
/// "ready" and then whatever the subcommand reports.
pub(crate) struct Worker {
    pub(crate) child: Child,
    pub(crate) stdin: ChildStdin,
    pub(crate) stdout: Lines<BufReader<ChildStdout>>,
}

/// Starts `distlock <subcommand> --child <job as JSON>` with `url` in its environment.
pub(crate) fn spawn(subcommand: &[&str], job: &impl Serialize, url: &str) -> Result<Worker> {
    let exe = std::env::current_exe().context("finding the distlock executable")?;
    let mut child = Command::new(&exe)
        .args(subcommand)
        .arg("--child")
        .arg(serde_json::to_string(job)?)
        // The URL goes in the environment, not the job: other users can read a command line
        // (ps, /proc/PID/cmdline), and the URL may hold a password.
        .env("DISTLOCK_URL", url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting a {} process", subcommand[0]))?;
    let stdin = child.stdin.take().context("child stdin")?;
    let stdout = BufReader::new(child.stdout.take().context("child stdout")?).lines();
    Ok(Worker {
        child,
        stdin,
        stdout,
    })
}

/// Waits until every worker said "ready", then sends them one start time, `lead` from now;
/// returns it (CLOCK_MONOTONIC ns).
pub(crate) async fn start_together(workers: &mut [Worker], lead: Duration) -> Result<u64> {
    for worker in workers.iter_mut() {
        worker.wait_ready().await?;
    }
    let start = monotonic_ns() + lead.as_nanos() as u64;
    for worker in workers.iter_mut() {
        worker.send_start(start).await?;
    }
    Ok(start)
}

impl Worker {
    /// Waits until the child said "ready" (it has connected to the store).
    pub(crate) async fn wait_ready(&mut self) -> Result<()> {
        match self.stdout.next_line().await? {
            Some(line) if line == "ready" => Ok(()),
            other => bail!("a child process failed to start (said {other:?})"),
        }
    }

    /// Sends the child its start time (CLOCK_MONOTONIC ns).
    pub(crate) async fn send_start(&mut self, start: u64) -> Result<()> {
        self.stdin
            .write_all(format!("{start}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        Ok(())
    }
}

/// In a child: says "ready" on stdout and reads the start time the parent sends.
pub(crate) async fn ready_then_start() -> Result<u64> {
    let mut stdout = tokio::io::stdout();
    stdout.write_all(b"ready\n").await?;
    stdout.flush().await?;
    let mut start = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut start)
        .await?;
    start.trim().parse().context("reading the start time")
}

/// Sleeps until CLOCK_MONOTONIC reads `at` ns (at once if it has passed).
pub(crate) async fn sleep_until_ns(at: u64) {
    let now = monotonic_ns();
    if at > now {
        tokio::time::sleep(Duration::from_nanos(at - now)).await;
    }
}

/// Returns once every thread of process `pid` is stopped (SIGSTOP), or the process has gone. kill(2)
/// returns before a thread running on another core has taken the signal, and a thread that has
/// not may still do work (answer a request, release a lock and log it) after the sender believes
/// the process stopped: callers that act on "stopped" wait for this first.
pub(crate) async fn stopped(pid: u32) {
    while !all_threads_stopped(pid) {
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
}

/// Whether every thread of process `pid` is stopped (state `T` or `t` in its
/// `/proc/PID/task/TID/stat`); a thread or process that is gone or exiting (`Z`, `X`) counts as
/// stopped: nothing of it runs.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        // "TID (COMM) STATE …": COMM may hold spaces and parentheses, so the state is read after
        // the last ')'.
        std::fs::read_to_string(task.path().join("stat")).map_or(true, |stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
                .is_some_and(|state| matches!(state, 'T' | 't' | 'Z' | 'X'))
        })
    })
}

#[cfg(test)]
mod stop_tests {
    use super::*;

    #[tokio::test]
    async fn a_stopped_process_is_seen_stopped_and_a_resumed_one_not() {
        let mut child = tokio::process::Command::new("sleep")
            .arg("30")
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pid = child.id().unwrap();
        let signal = |sig| {
            // SAFETY: kill() only sends a signal to our own child, not reaped yet.
            assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
        };
        let watching = tokio::spawn(stopped(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!watching.is_finished(), "a running process is not stopped");
        signal(libc::SIGSTOP);
        tokio::time::timeout(Duration::from_secs(5), watching)
            .await
            .expect("the stop is seen")
            .unwrap();
        signal(libc::SIGCONT);
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while all_threads_stopped(pid) {
            assert!(
                std::time::Instant::now() < until,
                "resumed, still seen stopped"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        child.kill().await.unwrap();
        child.wait().await.unwrap();
        assert!(
            all_threads_stopped(pid),
            "a process that is gone counts as stopped"
        );
    }
}
