//! Apache Curator as the other holder of a ZooKeeper lock: `java/CuratorHolder.java`, compiled
//! against Debian's Curator 5.4 jars, takes Curator's `InterProcessMutex` or a side of its
//! `InterProcessReadWriteLock` on a path and runs the shared critical-section protocol
//! ([`crate::section`]) inside each hold. A test runs it next to distlock on the same lock to
//! show the two exclude each other (distlock's lock `N` on `zk://host/C` is Curator's `/C/N`).
//!
//! ```no_run
//! # async fn f() -> Result<(), distlock_testkit::Failure> {
//! use distlock_testkit::curator::{self, CuratorJob, CuratorMode};
//! let dir = tempfile::tempdir()?;
//! let job = CuratorJob::new("127.0.0.1:2181", "/C/N", CuratorMode::Mutex, dir.path()).until_line();
//! let mut holder = curator::build()?.spawn(&job)?;
//! holder.wait_for("acquired", std::time::Duration::from_secs(30)).await?;
//! // … distlock cannot take C/N now …
//! holder.send_line().await?; // Curator leaves the section and releases
//! holder.finish(std::time::Duration::from_secs(30)).await?.check()?;
//! # Ok(()) }
//! ```
//!
//! The holder prints one event a line: `connected`, `waiting` (about to acquire), `acquired NODE`
//! (its lock node, `_c_<uuid>-lock-0000000003`), `shared` (a reader had another reader inside
//! with it), `overlap REASON`, `released`, `done N`, `error MESSAGE`; it exits 0 when all went
//! well, 2 after an overlap, 1 on any other error.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;

use crate::Failure;
use crate::servers::find_program;

const SOURCE: &str = include_str!("../java/CuratorHolder.java");
const MAIN: &str = "CuratorHolder";
const INSTALL: &str = "run scripts/services.sh zk to install it";

/// The jars the holder compiles and runs against: Curator's recipes, framework and client,
/// ZooKeeper's client and its wire format, Guava (Curator's collections) and SLF4J, with
/// slf4j-simple as the binding (warnings only, on stderr). No Netty: ZooKeeper's client talks
/// over plain NIO unless told otherwise.
const JARS: &[&str] = &[
    "/usr/share/java/curator-recipes.jar",
    "/usr/share/java/curator-framework.jar",
    "/usr/share/java/curator-client.jar",
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/guava.jar",
    "/usr/share/java/slf4j-api.jar",
    "/usr/share/java/slf4j-simple.jar",
];

/// The compiled holder, ready to run.
#[derive(Clone, Debug)]
pub struct CuratorProgram {
    classpath: String,
}

/// Compiles the holder with javac (once per test process; the classes are kept in the system
/// temporary directory under a name that hashes the source and the jars, so later processes
/// reuse them). Fails, naming scripts/services.sh zk, when javac or a jar is missing.
pub fn build() -> Result<CuratorProgram, Failure> {
    static BUILT: OnceLock<Result<CuratorProgram, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| compile().map_err(|f| f.0))
        .clone()
        .map_err(Failure)
}

fn compile() -> Result<CuratorProgram, Failure> {
    if let Some(missing) = JARS.iter().find(|jar| !Path::new(jar).is_file()) {
        return Err(Failure(format!(
            "the Curator holder needs {missing}, which is missing; {INSTALL}"
        )));
    }
    if find_program("java").is_none() {
        return Err(Failure(format!(
            "the Curator holder needs java, which is not on PATH; {INSTALL}"
        )));
    }
    let javac = find_program("javac").ok_or_else(|| {
        Failure(format!(
            "the Curator holder needs javac (a JDK), which is not on PATH; {INSTALL}"
        ))
    })?;
    let jars = JARS.join(":");
    let mut hash = DefaultHasher::new();
    (SOURCE, &jars).hash(&mut hash);
    let classes = std::env::temp_dir().join(format!("distlock-curator-{:016x}", hash.finish()));
    if !classes.join(format!("{MAIN}.class")).is_file() {
        // Compiled aside and renamed into place, so a concurrent test process never sees a
        // half-written directory; if one got there first, its classes are as good as ours.
        let build = tempfile::Builder::new()
            .prefix("distlock-curator-build-")
            .tempdir()?;
        let source = build.path().join(format!("{MAIN}.java"));
        let out = build.path().join("classes");
        std::fs::write(&source, SOURCE)?;
        crate::servers::run(
            std::process::Command::new(javac)
                .args(["-nowarn", "-d"])
                .arg(&out)
                .arg("-cp")
                .arg(&jars)
                .arg(&source)
                .stdin(Stdio::null()),
            "javac (compiling the Curator holder)",
        )?;
        if std::fs::rename(&out, &classes).is_err()
            && !classes.join(format!("{MAIN}.class")).is_file()
        {
            return Err(Failure(format!(
                "could not move the compiled Curator holder to {}",
                classes.display()
            )));
        }
    }
    Ok(CuratorProgram {
        classpath: format!("{}:{jars}", classes.display()),
    })
}

/// Which Curator lock the holder takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CuratorMode {
    /// `InterProcessMutex`: exclusive sections.
    Mutex,
    /// `InterProcessReadWriteLock.readLock()`: shared sections.
    Read,
    /// `InterProcessReadWriteLock.writeLock()`: exclusive sections.
    Write,
}

impl CuratorMode {
    fn arg(self) -> &'static str {
        match self {
            CuratorMode::Mutex => "mutex",
            CuratorMode::Read => "read",
            CuratorMode::Write => "write",
        }
    }
}

/// What one holder process does.
#[derive(Clone, Debug)]
pub struct CuratorJob {
    /// ZooKeeper connect string: `127.0.0.1:2181`, or `host:port,host:port` for an ensemble.
    pub connect: String,
    /// The lock's path (`/C/N`).
    pub path: String,
    /// Which lock.
    pub mode: CuratorMode,
    /// How many times to acquire, run the section and release.
    pub iterations: u32,
    /// The critical-section protocol's directory ([`crate::section`]).
    pub dir: PathBuf,
    /// How long each hold lasts (ignored with `until_line`).
    pub hold: Duration,
    /// Hold until a line arrives on stdin ([`CuratorHolder::send_line`]) or stdin closes.
    pub until_line: bool,
    /// The ZooKeeper session timeout the holder asks for.
    pub session_timeout: Duration,
    /// The holder fails (`error`) if it has not acquired within this.
    pub acquire_timeout: Duration,
}

impl CuratorJob {
    /// One acquisition of `mode` on `path` with no hold, a 10 s session and a 60 s acquire
    /// timeout; change them with the methods below.
    pub fn new(connect: &str, path: &str, mode: CuratorMode, dir: &Path) -> Self {
        CuratorJob {
            connect: connect.to_string(),
            path: path.to_string(),
            mode,
            iterations: 1,
            dir: dir.to_path_buf(),
            hold: Duration::ZERO,
            until_line: false,
            session_timeout: Duration::from_secs(10),
            acquire_timeout: Duration::from_secs(60),
        }
    }

    /// `iterations` acquisitions.
    pub fn iterations(mut self, iterations: u32) -> Self {
        self.iterations = iterations;
        self
    }

    /// Each hold lasts `hold`.
    pub fn hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// Each hold lasts until a line arrives on stdin.
    pub fn until_line(mut self) -> Self {
        self.until_line = true;
        self
    }

    /// Asks ZooKeeper for sessions of `timeout`.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }
}

impl CuratorProgram {
    /// The Java class path of the compiled holder and its jars.
    pub fn classpath(&self) -> &str {
        &self.classpath
    }

    /// The command that runs `job` (stdin, stdout and stderr not yet set).
    pub fn command(&self, job: &CuratorJob) -> Command {
        let mut command = Command::new("java");
        command
            .args(["-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .arg("-cp")
            .arg(&self.classpath)
            .arg(MAIN)
            .arg(&job.connect)
            .arg(&job.path)
            .arg(job.mode.arg())
            .arg(job.iterations.to_string())
            .arg(&job.dir)
            .arg(job.hold.as_millis().to_string())
            .arg("--session-ms")
            .arg(job.session_timeout.as_millis().to_string())
            .arg("--acquire-timeout-ms")
            .arg(job.acquire_timeout.as_millis().to_string());
        if job.until_line {
            command.arg("--until-line");
        }
        command
    }

    /// Starts a holder process running `job`; it is killed if dropped before it finishes.
    pub fn spawn(&self, job: &CuratorJob) -> Result<CuratorHolder, Failure> {
        let mut child = self
            .command(job)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                Failure(format!(
                    "the Curator holder could not start ({e}); {INSTALL}"
                ))
            })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        // Drained all along, so a chatty JVM never blocks on a full pipe.
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            text
        });
        Ok(CuratorHolder {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            events: Vec::new(),
            stderr,
        })
    }
}

/// A running Curator holder process.
pub struct CuratorHolder {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    events: Vec<String>,
    stderr: JoinHandle<String>,
}

impl CuratorHolder {
    /// The process id (to pause it with SIGSTOP, or kill it as a crashed holder).
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// The events printed so far.
    pub fn events(&self) -> &[String] {
        &self.events
    }

    /// The next event, or `None` once the holder has closed its output.
    pub async fn next_event(&mut self, timeout: Duration) -> Result<Option<String>, Failure> {
        let printing = format!(
            "the Curator holder printing a line (events so far: {:?})",
            self.events
        );
        let line = crate::within(timeout, self.lines.next_line(), &printing).await??;
        if let Some(line) = &line {
            self.events.push(line.clone());
        }
        Ok(line)
    }

    /// Reads events until one is `event` or starts with `event ` and returns it; fails on an
    /// `overlap` or `error` event, at the end of the output, or after `timeout`.
    pub async fn wait_for(&mut self, event: &str, timeout: Duration) -> Result<String, Failure> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let line = match self.next_event(left).await {
                Ok(Some(line)) => line,
                Ok(None) => {
                    let stderr = self.stderr_so_far().await;
                    return Err(Failure(format!(
                        "the Curator holder ended before `{event}` (events: {:?}); stderr: {stderr}",
                        self.events
                    )));
                }
                Err(Failure(why)) => return Err(Failure(format!("waiting for `{event}`: {why}"))),
            };
            if is_event(&line, event) {
                return Ok(line);
            }
            if is_event(&line, "overlap") || is_event(&line, "error") {
                return Err(Failure(format!(
                    "the Curator holder reported `{line}` while waiting for `{event}` \
                     (events: {:?})",
                    self.events
                )));
            }
        }
    }

    /// Tells a holder running with `until_line` to leave its section and release.
    pub async fn send_line(&mut self) -> Result<(), Failure> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| Failure("the Curator holder's stdin is closed".to_string()))?;
        stdin.write_all(b"go\n").await?;
        stdin.flush().await?;
        Ok(())
    }

    /// Fails unless the holder prints nothing for `quiet` (it waits for the lock); `what` says
    /// while what it must wait, in the failure.
    pub async fn check_waits(&mut self, quiet: Duration, what: &str) -> Result<(), Failure> {
        let next = self.next_event(quiet).await;
        if next.is_ok() {
            return Err(Failure(format!(
                "the holder went on {what}: {next:?}, events {:?}",
                self.events
            )));
        }
        Ok(())
    }

    /// Has a holder running with `until_line` release, and waits (up to `timeout`) for it to
    /// finish cleanly ([`CuratorReport::check`]); its report.
    pub async fn release_and_finish(mut self, timeout: Duration) -> Result<CuratorReport, Failure> {
        self.send_line().await?;
        let report = self.finish(timeout).await?;
        report.check()?;
        Ok(report)
    }

    /// Waits (up to `timeout` each) for the holder to take the lock, then to finish cleanly
    /// ([`CuratorReport::check`]).
    pub async fn acquires_and_finishes(mut self, timeout: Duration) -> Result<(), Failure> {
        self.wait_for("acquired", timeout).await?;
        self.finish(timeout).await?.check()
    }

    /// Closes stdin (a holder running with `until_line` releases), reads the remaining events
    /// and waits for the process to exit, within `timeout`.
    pub async fn finish(mut self, timeout: Duration) -> Result<CuratorReport, Failure> {
        self.stdin = None;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if self.next_event(left).await?.is_none() {
                break;
            }
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let exiting = format!("the Curator holder exiting (events: {:?})", self.events);
        let status = crate::within(left, self.child.wait(), &exiting).await??;
        let stderr = (&mut self.stderr).await.unwrap_or_default();
        Ok(CuratorReport {
            status,
            events: std::mem::take(&mut self.events),
            stderr,
        })
    }

    /// What the holder wrote on stderr so far, once it has exited (for failure messages).
    async fn stderr_so_far(&mut self) -> String {
        match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(_) => tokio::time::timeout(Duration::from_secs(1), &mut self.stderr)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            Err(_) => "(still running)".to_string(),
        }
    }
}

/// Whether `line` is the event `event` (alone or followed by a space and details).
fn is_event(line: &str, event: &str) -> bool {
    line == event
        || line
            .strip_prefix(event)
            .is_some_and(|rest| rest.starts_with(' '))
}

/// How a holder process ended, and what it printed.
#[derive(Debug)]
pub struct CuratorReport {
    /// Its exit status: 0 all went well, 2 overlap seen, 1 another error.
    pub status: ExitStatus,
    /// Every event line, in order.
    pub events: Vec<String>,
    /// What it wrote on stderr (Curator's and ZooKeeper's warnings, a Java stack trace).
    pub stderr: String,
}

impl CuratorReport {
    /// How many events were `event` (alone or with details).
    pub fn count(&self, event: &str) -> usize {
        self.events.iter().filter(|l| is_event(l, event)).count()
    }

    /// The `overlap` events' reasons.
    pub fn overlaps(&self) -> Vec<&str> {
        self.details("overlap")
    }

    /// The lock nodes it held, in order (`_c_<uuid>-lock-0000000003`).
    pub fn nodes(&self) -> Vec<&str> {
        self.details("acquired")
    }

    fn details(&self, event: &str) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|l| l.strip_prefix(event)?.strip_prefix(' '))
            .collect()
    }

    /// Fails unless the holder exited 0 after `done`, with no overlap.
    pub fn check(&self) -> Result<(), Failure> {
        if self.status.success() && self.count("done") == 1 && self.overlaps().is_empty() {
            return Ok(());
        }
        Err(Failure(format!(
            "the Curator holder failed ({}): events {:?}; stderr: {}",
            self.status, self.events, self.stderr
        )))
    }
}
