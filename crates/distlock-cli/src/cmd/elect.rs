//! `distlock elect`: run a command only while leader of an election, and `distlock leader`: show
//! (or follow) who leads.
//!
//! `elect` campaigns, runs COMMAND once it leads, and stops COMMAND when the leadership is lost,
//! exactly as `exec` does for a lock (the same code: [`super::exec::run_while`]). When COMMAND
//! ends, it resigns, so a waiting campaigner takes over at once. A store that cannot be reached
//! when `elect` starts is tried again, with growing pauses, until it can.

use std::process::ExitCode;
use std::time::Duration;

use futures_util::StreamExt;

use super::connect::{Patience, connect};
use super::exec::{Signals, after_release, run_while};
use crate::duration;

/// Arguments of `distlock elect`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "A store that cannot be reached when elect starts is tried again (every 5s at \
                  most, each failure said on stderr) until it can, as a campaign waits for as \
                  long as it takes.\n\
                  Exit status: COMMAND's own; 69 if the store fails; 76 if \
                  leadership was lost while COMMAND ran (COMMAND gets SIGTERM, then SIGKILL after \
                  5s) or was found gone when COMMAND ended (a message says so; never COMMAND's \
                  0); 64 for invalid or missing arguments (or a store without leader election); \
                  126/127 if COMMAND cannot be run.\n\
                  COMMAND's environment gets DISTLOCK_ELECTION, DISTLOCK_LEADER_VALUE and \
                  DISTLOCK_TERM (the term, a fencing token: larger for every new leader)."
)]
pub(crate) struct ElectArgs {
    /// Store URL [default: $DISTLOCK_URL, else sqlite:distlock.db in the working directory].
    #[arg(long, env = "DISTLOCK_URL", hide_env_values = true)]
    url: Option<String>,
    /// How soon a crashed leader is replaced; renewed every lease/3 while COMMAND runs
    /// [default: 10s]. A session store refuses a lease it cannot keep (exit 64).
    #[arg(long, env = "DISTLOCK_LEASE", value_parser = duration::parse, allow_hyphen_values = true)]
    lease: Option<Duration>,
    /// What this candidate proclaims when it leads (shown by `distlock leader`)
    /// [default: HOSTNAME:PID].
    #[arg(long, env = "DISTLOCK_ELECT_VALUE")]
    value: Option<String>,
    /// The election's name.
    name: String,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Arguments of `distlock leader`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Prints VALUE<TAB>TERM of the current leader. Exit status: 0 with a leader; 1 \
                  without one; 69 if the store cannot be reached or fails; 64 for invalid arguments.\n\
                  With --watch: prints a line per new leader (and per new value a leader \
                  proclaims), in term order, until interrupted. With --json each line is \
                  {\"term\": TERM, \"value\": VALUE} instead."
)]
pub(crate) struct LeaderArgs {
    /// Store URL [default: $DISTLOCK_URL, else sqlite:distlock.db in the working directory].
    #[arg(long, env = "DISTLOCK_URL", hide_env_values = true)]
    url: Option<String>,
    /// Follow the election: print every new leader as it is elected.
    #[arg(long)]
    watch: bool,
    /// One JSON object per leader instead of VALUE<TAB>TERM.
    #[arg(long, env = "DISTLOCK_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    json: bool,
    /// The election's name.
    name: String,
}

fn failed(what: &str, name: &str, e: &distlock::Error) -> ExitCode {
    super::exec::failed(&format!("election {name:?}: {what}"), e)
}

fn default_value() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("{host}:{}", std::process::id())
}

pub(crate) async fn run_elect(args: ElectArgs) -> ExitCode {
    let url = args.url.as_deref().unwrap_or(distlock::DEFAULT_URL);
    // A candidate campaigns for as long as it takes, so it waits as long for a store that is
    // down or still starting: a fleet started before its store, or across a store's restart,
    // still elects a leader once the store is up. Each failure is said once per pause, as
    // nothing else shows why no COMMAND runs yet; Ctrl-C or SIGTERM end the wait (no handlers
    // are installed yet).
    let retrying = |e: &distlock::Error, pause: Duration| {
        eprintln!(
            "distlock: election {:?}: the store cannot be reached, trying again in {}: {}",
            args.name,
            humantime::format_duration(pause),
            distlock::error::chain(e)
        );
    };
    let client = match connect(url, Patience::Forever, retrying).await {
        Ok(c) => c,
        Err(e) => return failed("not leader", &args.name, &e),
    };
    let value = args.value.clone().unwrap_or_else(default_value);
    // Only a lease asked for is set: the default is never refused (see `Election::lease`).
    let election = match args.lease {
        Some(lease) => client.election(&args.name).lease(lease),
        None => client.election(&args.name),
    };
    let mut interrupted = Signals::new();
    let leadership = tokio::select! {
        won = election.campaign(value.clone()) => match won {
            Ok(l) => l,
            Err(e) => return failed("not leader", &args.name, &e),
        },
        sig = interrupted.next() => {
            eprintln!("distlock: interrupted while campaigning in election {:?}", args.name);
            return ExitCode::from(128u8.saturating_add(sig as u8));
        }
    };
    let env = [
        ("DISTLOCK_ELECTION", args.name.clone()),
        ("DISTLOCK_LEADER_VALUE", value),
        ("DISTLOCK_TERM", leadership.term().to_string()),
    ];
    let lost = leadership.lost();
    let ran = run_while(
        &args.command,
        &env,
        async { lost.await.to_string() },
        &mut interrupted,
    )
    .await;
    let resigned = leadership.resign().await;
    let code = after_release(
        ran,
        resigned,
        &format!("the leadership of election {:?}", args.name),
        "resigning failed",
        "the next leader takes over when the lease ends",
    );
    client.shutdown().await;
    code
}

pub(crate) async fn run_leader(args: LeaderArgs) -> ExitCode {
    let url = args.url.as_deref().unwrap_or(distlock::DEFAULT_URL);
    let client = match connect(url, Patience::Once, |_, _| {}).await {
        Ok(c) => c,
        Err(e) => return failed("cannot read the leader", &args.name, &e),
    };
    let election = client.election(&args.name);
    if !args.watch {
        return match election.leader().await {
            Ok(Some(leader)) => {
                print_leader(&leader, args.json);
                ExitCode::SUCCESS
            }
            Ok(None) => {
                eprintln!("distlock: election {:?} has no leader", args.name);
                ExitCode::from(1)
            }
            Err(e) => failed("cannot read the leader", &args.name, &e),
        };
    }
    let mut leaders = match election.observe().await {
        Ok(leaders) => Box::pin(leaders),
        Err(e) => return failed("cannot follow the leader", &args.name, &e),
    };
    let mut interrupted = Signals::new();
    loop {
        tokio::select! {
            next = leaders.next() => match next {
                Some(Ok(leader)) => print_leader(&leader, args.json),
                Some(Err(e)) => eprintln!(
                    "distlock: election {:?}: reading failed, retrying: {}",
                    args.name,
                    distlock::error::chain(&e)
                ),
                None => return ExitCode::SUCCESS,
            },
            sig = interrupted.next() => return ExitCode::from(128u8.saturating_add(sig as u8)),
        }
    }
}

/// One line for `leader`: VALUE<TAB>TERM, or the library's serde form of [`distlock::Leader`].
fn print_leader(leader: &distlock::Leader, json: bool) {
    if json {
        match serde_json::to_value(leader) {
            Ok(value) => println!("{value}"),
            Err(e) => eprintln!("distlock: cannot write the leader as JSON: {e}"),
        }
    } else {
        println!("{}\t{}", leader.value, leader.term);
    }
}
