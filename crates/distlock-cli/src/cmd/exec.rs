//! `distlock exec`: run a command while holding a lock.
//!
//! Which lock: the exclusive lock NAME by default; with `--shared` / `--write` a reader / the
//! writer of the read-write lock NAME; with `--limit N` a permit of the semaphore NAME of size N;
//! with `--fair` the fair (first come, first served) lock NAME. Each flavour is a lock of its own
//! in the store: a plain `exec` and a `--write` of the same NAME do not exclude each other.
//!
//! Exit status: COMMAND's own (128 + signal if a signal ended it); [`EXIT_NOT_OBTAINED`] (or
//! `--conflict-exit-code`) when the lock is held by another (taken with `--no-wait`, `--wait`
//! ran out); [`EXIT_UNAVAILABLE`] when the store cannot be reached or fails; [`EXIT_LEASE_LOST`]
//! when the lock was lost while COMMAND ran or `--max-hold` ran out (COMMAND is then stopped),
//! or found gone at the release; [`EXIT_USAGE`] for invalid arguments (a name, lease, wait or URL, a flavour the store
//! lacks, a semaphore size that differs from the store's); 126/127 when COMMAND cannot be
//! started.

use std::io::IsTerminal;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use std::future::Future;

use distlock::ErrorKind;
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use super::connect::{Patience, connect};
use crate::{EXIT_UNAVAILABLE, EXIT_USAGE, duration};

mod tether;

/// The lock is held by another: taken (`--no-wait`), or for all of `--wait` (EX_TEMPFAIL: try
/// again later).
pub(crate) const EXIT_NOT_OBTAINED: u8 = 75;
/// The lock was lost while COMMAND ran or `--max-hold` ran out (COMMAND was stopped), or found
/// gone at the release (EX_PROTOCOL).
pub(crate) const EXIT_LEASE_LOST: u8 = 76;
/// A `--wait` this long or longer is waiting forever. Far below what `Instant` can represent, so
/// no deadline is ever computed from an absurd `--wait 500000000000y`.
const WAIT_FOREVER_FROM: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// How long COMMAND gets between SIGTERM and SIGKILL after the lease is lost.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Arguments of `distlock exec`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Which lock: the exclusive lock NAME; --shared or --write: a reader or the writer \
                  of the read-write lock NAME (readers share it, a writer excludes both); \
                  --limit N: one of N permits of the semaphore NAME (refused, exit 64, if the \
                  semaphore already has another size); --fair: the lock NAME served first come, \
                  first served. Each is a lock of its own: a plain exec and a --write of the \
                  same NAME do not exclude each other. A store without the flavour refuses it \
                  (exit 64; which store has which: https://docs.rs/distlock).\n\
                  Exit status: COMMAND's own; 75 (or --conflict-exit-code) if the lock is held \
                  by another (--no-wait, or --wait ran out); 69 if the store cannot be reached \
                  or fails; 76 if the lock was lost while COMMAND ran, or --max-hold ran out \
                  (COMMAND gets SIGTERM, then SIGKILL after 5s), or was found gone when \
                  COMMAND ended (a message says so; never COMMAND's 0); 64 for invalid or missing arguments; 126/127 if \
                  COMMAND cannot be run.\n\
                  COMMAND's environment gets DISTLOCK_LOCK_NAME and DISTLOCK_FENCING_TOKEN."
)]
pub(crate) struct ExecArgs {
    /// Store URL [default: $DISTLOCK_URL, else sqlite:distlock.db in the working directory].
    #[arg(long, env = "DISTLOCK_URL", hide_env_values = true)]
    url: Option<String>,
    /// How soon a crashed holder's lock frees; renewed every lease/3 while COMMAND runs
    /// [default: 30s]. A session store refuses a lease it cannot keep (exit 64).
    // `allow_hyphen_values`: `--lease -1s` is a bad lease, not an unknown flag `-1`.
    #[arg(long, env = "DISTLOCK_LEASE", value_parser = duration::parse, allow_hyphen_values = true)]
    lease: Option<Duration>,
    /// Give up (exit 75) if the lock is not free within this time [default: wait forever]. A
    /// store that cannot be reached is tried again within it (then exit 69) [env: DISTLOCK_WAIT,
    /// unless --no-wait is given]
    // Not clap's `env`: clap would refuse `--no-wait` beside a $DISTLOCK_WAIT as it refuses it
    // beside a `--wait`; the variable is a default that either flag overrides (`wait_or_env`).
    #[arg(
        long,
        value_parser = duration::parse,
        allow_hyphen_values = true,
        conflicts_with = "no_wait"
    )]
    wait: Option<Duration>,
    /// Give up (exit 75) at once if the lock is taken (wins over $DISTLOCK_WAIT).
    #[arg(long)]
    no_wait: bool,
    /// Hold the lock at most this long: COMMAND then gets SIGTERM (SIGKILL 5s later) and
    /// distlock exits 76 saying the hold cap ended it [default: no cap]. Caps a stuck job that
    /// is alive and would renew its lease forever.
    #[arg(long, env = "DISTLOCK_MAX_HOLD", value_parser = duration::parse, allow_hyphen_values = true)]
    max_hold: Option<Duration>,
    /// Exit with N instead of 75 when the lock is held by another (flock's -E).
    #[arg(
        short = 'E',
        long,
        value_name = "N",
        env = "DISTLOCK_CONFLICT_EXIT_CODE"
    )]
    conflict_exit_code: Option<u8>,
    /// Hold a reader of the read-write lock NAME: readers run together, a --write excludes them.
    #[arg(long, group = "flavour")]
    shared: bool,
    /// Hold the writer of the read-write lock NAME: no reader or other writer meanwhile.
    #[arg(long, group = "flavour")]
    write: bool,
    /// Hold one permit of the semaphore NAME of N permits: at most N commands run at once.
    #[arg(long, value_name = "N", group = "flavour",
          value_parser = clap::value_parser!(u32).range(1..))]
    limit: Option<u32>,
    /// Hold the fair lock NAME: waiters get it in the order they asked.
    #[arg(long, group = "flavour")]
    fair: bool,
    /// Run this string with `/bin/sh -c` instead of a COMMAND after `--`.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "SHELL_COMMAND",
        conflicts_with = "command"
    )]
    shell: Option<String>,
    /// The lock's name.
    name: String,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required_unless_present = "shell", value_name = "COMMAND")]
    command: Vec<String>,
}

impl ExecArgs {
    /// The lock of the flavour the flags ask for.
    fn lock(&self, client: &distlock::Client) -> distlock::Lock {
        let name = &self.name;
        if self.shared {
            client.rw_lock(name).read()
        } else if self.write {
            client.rw_lock(name).write()
        } else if let Some(permits) = self.limit {
            client.semaphore(name, permits)
        } else if self.fair {
            client.fair_lock(name)
        } else {
            client.lock(name)
        }
    }

    /// COMMAND and its arguments: `-c`'s string run by the shell, else what follows `--`.
    fn argv(&self) -> Vec<String> {
        match &self.shell {
            Some(line) => vec!["/bin/sh".into(), "-c".into(), line.clone()],
            None => self.command.clone(),
        }
    }

    /// `status` as the exit status, with `--conflict-exit-code` in place of 75 ("held by
    /// another").
    fn exit(&self, status: u8) -> ExitCode {
        match self.conflict_exit_code {
            Some(chosen) if status == EXIT_NOT_OBTAINED => ExitCode::from(chosen),
            _ => ExitCode::from(status),
        }
    }
}

pub(crate) async fn run(args: ExecArgs) -> ExitCode {
    if args.max_hold.is_some_and(|hold| hold.is_zero()) {
        eprintln!("distlock: --max-hold must be longer than zero (or left out: no cap)");
        return ExitCode::from(EXIT_USAGE);
    }
    let url = args.url.as_deref().unwrap_or(distlock::DEFAULT_URL);
    let wait = match wait_or_env(&args) {
        Ok(wait) => wait.filter(|w| *w < WAIT_FOREVER_FROM),
        Err(why) => {
            eprintln!("distlock: {why}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let started = Instant::now();
    // Within a wait, a store still starting or restarting is tried again (silently: the wait
    // bounds it, and its end says why); without one it fails at once, rather than hanging a cron
    // job on a mistyped URL.
    let client = match connect(url, Patience::within(wait), |_, _| {}).await {
        Ok(c) => c,
        Err(e) => return args.exit(not_obtained(&args.name, &e)),
    };
    // Only a lease asked for is set: the default is never refused (see `Lock::lease`).
    let lock = match args.lease {
        Some(lease) => args.lock(&client).lease(lease),
        None => args.lock(&client),
    };
    // COMMAND is stopped at the cap; the lease is renewed through its grace to stop, and no
    // longer, should distlock itself be stuck.
    let lock = match args.max_hold {
        Some(hold) => lock.max_hold(hold.saturating_add(STOP_GRACE)),
        None => lock,
    };
    let mut interrupted = Signals::new();
    let taken = tokio::select! {
        taken = async {
            if args.no_wait {
                lock.try_acquire().await
            } else if let Some(wait) = wait {
                // What connecting left of the wait.
                let left = wait.saturating_sub(started.elapsed());
                lock.acquire_timeout(left).await.map(Some)
            } else {
                lock.acquire().await.map(Some)
            }
        } => taken,
        sig = interrupted.next() => {
            eprintln!("distlock: interrupted while waiting for lock {:?}", args.name);
            return ExitCode::from(128u8.saturating_add(sig as u8));
        }
    };
    let guard = match taken {
        Ok(Some(g)) => g,
        Ok(None) => {
            eprintln!("distlock: lock {:?} is held by another owner", args.name);
            return args.exit(EXIT_NOT_OBTAINED);
        }
        Err(e) => return args.exit(not_obtained(&args.name, &e)),
    };
    let env = [
        ("DISTLOCK_LOCK_NAME", args.name.clone()),
        ("DISTLOCK_FENCING_TOKEN", guard.fencing_token().to_string()),
    ];
    let lost = guard.lost();
    let ended = async {
        let Some(hold) = args.max_hold else {
            return lost.await.to_string();
        };
        tokio::select! {
            why = lost => why.to_string(),
            () = tokio::time::sleep(hold) => format!(
                "lock {:?} was held for its --max-hold of {}: the hold cap ended it",
                args.name,
                humantime::format_duration(hold)
            ),
        }
    };
    let ran = run_while(&args.argv(), &env, ended, &mut interrupted).await;
    let name = guard.name().to_string();
    let released = guard.release().await;
    after_release(
        ran,
        released,
        &format!("lock {name:?}"),
        "releasing it failed",
        "it frees when its lease ends",
    )
}

/// `--wait`, else `$DISTLOCK_WAIT` unless `--no-wait` was given.
fn wait_or_env(args: &ExecArgs) -> Result<Option<Duration>, String> {
    if args.wait.is_some() || args.no_wait {
        return Ok(args.wait);
    }
    match std::env::var("DISTLOCK_WAIT") {
        Ok(text) if !text.is_empty() => duration::parse(&text)
            .map(Some)
            .map_err(|why| format!("invalid value {text:?} for $DISTLOCK_WAIT: {why}")),
        _ => Ok(None),
    }
}

/// Says why lock `name` was not obtained; its exit status by [`failure_status`].
fn not_obtained(name: &str, e: &distlock::Error) -> u8 {
    eprintln!(
        "distlock: lock {name:?} not obtained: {}",
        distlock::error::chain(e)
    );
    failure_status(e)
}

/// Says `what` failed and why, and answers the exit status every subcommand gives for it (see
/// [`failure_status`]).
pub(crate) fn failed(what: &str, e: &distlock::Error) -> ExitCode {
    eprintln!("distlock: {what}: {}", distlock::error::chain(e));
    ExitCode::from(failure_status(e))
}

/// The exit status of a failure: 64 for what the caller asked wrongly (or the store cannot do),
/// 75 for a lock held by another all along (a wait ran out, a holding lost while being taken),
/// 69 for the store's failure (unreachable, too few servers answering, an error of its own).
fn failure_status(e: &distlock::Error) -> u8 {
    // A wait that ran out before the store answered at all says so with a Connection error as
    // its source (see `Lock::acquire_timeout`).
    let unanswered = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<distlock::Error>())
        .is_some_and(|s| s.kind() == ErrorKind::Connection);
    match e.kind() {
        ErrorKind::InvalidName
        | ErrorKind::InvalidLease
        | ErrorKind::InvalidUrl
        | ErrorKind::InvalidInput
        | ErrorKind::Unsupported => EXIT_USAGE,
        ErrorKind::Timeout if unanswered => EXIT_UNAVAILABLE,
        ErrorKind::Timeout | ErrorKind::LeaseLost | ErrorKind::NotHeld | ErrorKind::StaleToken => {
            EXIT_NOT_OBTAINED
        }
        _ => EXIT_UNAVAILABLE,
    }
}

/// How COMMAND's run under a holding ended.
pub(crate) enum Ran {
    /// COMMAND ended by itself: its exit status, and how it ended in words ("exited with 0").
    Ended(ExitCode, String),
    /// The holding was lost and COMMAND stopped (already said).
    Stopped,
    /// COMMAND could not be run (already said): 126, 127, or 64 for no COMMAND.
    NotRun(ExitCode),
}

/// The exit status once COMMAND is over and the holding (`what`: `lock "x"`) given back
/// (`released`: the release's or resignation's answer): COMMAND's own, unless the holding was
/// lost, while COMMAND ran or found gone at the release (then [`EXIT_LEASE_LOST`] and a
/// message: COMMAND may have run partly without it). A release that fails otherwise (the store
/// unreachable) is said with `failure` and `consequence`; COMMAND's status stands, as the lease
/// was still ours by this process's clock when COMMAND ended (the lost signal had not fired).
pub(crate) fn after_release(
    ran: Ran,
    released: distlock::Result<bool>,
    what: &str,
    failure: &str,
    consequence: &str,
) -> ExitCode {
    let how = match ran {
        Ran::Stopped => return ExitCode::from(EXIT_LEASE_LOST),
        Ran::NotRun(code) => return code,
        Ran::Ended(code, how) => match &released {
            Ok(true) => return code,
            Err(e) if !is_lost(e) => {
                eprintln!(
                    "distlock: {what}: {failure} ({}); {consequence}",
                    distlock::error::chain(e)
                );
                return code;
            }
            _ => how,
        },
    };
    let why = match released {
        Err(e) => format!(" ({})", distlock::error::chain(&e)),
        Ok(_) => String::new(),
    };
    eprintln!(
        "distlock: {what} was no longer held when COMMAND ended{why}: its lease ran out unseen \
         (a paused process, a slow store) or `distlock release --force` took it; COMMAND {how}, \
         perhaps partly without it"
    );
    ExitCode::from(EXIT_LEASE_LOST)
}

/// Whether a release's error says the holding was already gone.
fn is_lost(e: &distlock::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::LeaseLost | ErrorKind::NotHeld | ErrorKind::StaleToken
    )
}

/// Runs COMMAND (`command`, with `env` added to its environment) to its end unless `lost`
/// resolves first, with why (then COMMAND gets SIGTERM, SIGKILL after [`STOP_GRACE`], and the
/// answer is [`Ran::Stopped`]), and makes sure it does not outlive distlock. Shared by `exec`
/// (the lock's lost signal or its hold cap) and `elect` (the leadership's lost signal).
pub(crate) async fn run_while(
    command: &[String],
    env: &[(&str, String)],
    lost: impl Future<Output = String>,
    signals: &mut Signals,
) -> Ran {
    // Without a terminal (cron, scripts) COMMAND leads a process group of its own, and signals go
    // to the whole group: stopping COMMAND after a lost lease also stops what it started. With a
    // terminal it stays in our group, so it can still read the terminal (job control).
    let own_group = !std::io::stdin().is_terminal();
    let Some((program, arguments)) = command.split_first() else {
        eprintln!("distlock: no command to run");
        return Ran::NotRun(ExitCode::from(EXIT_USAGE));
    };
    let mut command = Command::new(program);
    // If distlock dies from here on, however it dies, the watcher stops COMMAND and all it
    // started. With a group of its own, COMMAND joins the watcher's, started first; in our
    // group (a terminal), the watcher follows COMMAND's pid once it has one.
    let mut tether = None;
    if own_group {
        match tether::Tether::for_new_group() {
            Ok(t) => {
                command.process_group(t.group());
                tether = Some(t);
            }
            Err(e) => {
                watcher_failed(&e);
                command.process_group(0);
            }
        }
    }
    tether::die_with_parent(&mut command);
    command.args(arguments);
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = match command
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("distlock: cannot run {program:?}: {e}");
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Ran::NotRun(ExitCode::from(code));
        }
    };
    let target = child.id().map(|pid| {
        let pid = pid as libc::pid_t;
        match &tether {
            Some(t) if own_group => -t.group(),
            _ if own_group => -pid,
            _ => pid,
        }
    });
    if !own_group && let Some(pid) = target {
        tether = tether::Tether::attach(pid).inspect_err(watcher_failed).ok();
    }
    let (status, ran) = wait_holding(&mut child, target, lost, signals).await;
    // COMMAND has ended: the watcher leaves what COMMAND left running alone, as a normal exit
    // always has. If we could not learn that COMMAND ended, it stays and kills the group as we
    // exit.
    if status.is_ok()
        && let Some(tether) = tether
    {
        tether.stand_down();
    }
    ran
}

fn watcher_failed(e: &std::io::Error) {
    eprintln!(
        "distlock: cannot start the watcher ({e}); if distlock is killed, what COMMAND started \
         may outlive it"
    );
}

/// Waits for COMMAND to end, forwarding signals and stopping it if the lease is lost.
async fn wait_holding(
    child: &mut tokio::process::Child,
    target: Option<libc::pid_t>,
    lost: impl Future<Output = String>,
    signals: &mut Signals,
) -> (std::io::Result<std::process::ExitStatus>, Ran) {
    tokio::pin!(lost);
    loop {
        tokio::select! {
            status = child.wait() => {
                let ran = ended(&status);
                return (status, ran);
            }
            sig = signals.next() => {
                if let Some(target) = target {
                    send(target, sig);
                }
            }
            why = &mut lost => {
                eprintln!("distlock: {why}; stopping the command");
                let mut status = Err(std::io::Error::other("COMMAND has no pid"));
                if let Some(target) = target {
                    send(target, libc::SIGTERM);
                    status = match tokio::time::timeout(STOP_GRACE, child.wait()).await {
                        Ok(status) => status,
                        Err(_) => {
                            eprintln!("distlock: the command ignored SIGTERM for {STOP_GRACE:?}; killing it");
                            send(target, libc::SIGKILL);
                            child.wait().await
                        }
                    };
                }
                return (status, Ran::Stopped);
            }
        }
    }
}

/// COMMAND's end: its exit status (128 + N for signal N), and in words.
fn ended(status: &std::io::Result<std::process::ExitStatus>) -> Ran {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => {
                Ran::Ended(ExitCode::from(code as u8), format!("exited with {code}"))
            }
            (None, Some(sig)) => Ran::Ended(
                ExitCode::from(128u8.saturating_add(sig as u8)),
                format!("was ended by signal {sig}"),
            ),
            (None, None) => Ran::Ended(ExitCode::FAILURE, "ended".into()),
        },
        Err(e) => {
            eprintln!("distlock: waiting for the command failed: {e}");
            Ran::Ended(ExitCode::FAILURE, "ended unseen".into())
        }
    }
}

/// Sends `sig` to a process (`target` > 0) or a process group (`target` < 0).
fn send(target: libc::pid_t, sig: i32) {
    // SAFETY: kill(2) takes two integers and touches no memory of ours. `target` is the pid
    // of the child we spawned (tokio gives an id only until the child is reaped) or minus
    // its process group's id, never 0 or -1 (our own group, every process).
    unsafe {
        libc::kill(target, sig);
    }
}

/// The signals `exec` and `elect` pass on to COMMAND.
pub(crate) struct Signals {
    streams: Vec<(i32, tokio::signal::unix::Signal)>,
}

impl Signals {
    pub(crate) fn new() -> Self {
        let wanted = [
            (libc::SIGINT, SignalKind::interrupt()),
            (libc::SIGTERM, SignalKind::terminate()),
            (libc::SIGHUP, SignalKind::hangup()),
            (libc::SIGQUIT, SignalKind::quit()),
        ];
        let streams = wanted
            .into_iter()
            .filter_map(|(num, kind)| signal(kind).ok().map(|s| (num, s)))
            .collect();
        Signals { streams }
    }

    /// The next signal received.
    pub(crate) async fn next(&mut self) -> i32 {
        if self.streams.is_empty() {
            return std::future::pending().await;
        }
        let waits = self.streams.iter_mut().map(|(num, s)| {
            let num = *num;
            Box::pin(async move {
                s.recv().await;
                num
            })
        });
        futures_util::future::select_all(waits).await.0
    }
}
