//! `distlock status`: who holds which lock, since when, with which fencing token and how much
//! lease is left; and `distlock release --force`: the way out when a holder is wedged.
//!
//! Both are thin: the store answers ([`distlock::Client::status`],
//! [`distlock::Client::force_release`]); this prints it. The JSON shape is shared with
//! `distlock serve`'s `/api/locks` ([`locks_json`]).

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use distlock::{ForcedRelease, Holding, LockKind, LockStatus};
use serde_json::Value;

use super::connect::{Patience, connect};
use super::exec::failed;
use crate::EXIT_USAGE;

/// Arguments of `distlock status`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Prints one line per holding: name, kind, fencing token, holder (pid, host, \
                  process), since, lease left, waiters (where the store keeps them). What the \
                  store's configuration puts at risk (a Redis that may evict lock keys) is said \
                  on stderr, one `distlock: warning: …` line each, with --json too.\n\
                  Exit status: 0 if something is shown (with --prefix: always); 1 if lock NAME \
                  is not held; 69 if the store cannot be reached or fails; 64 for invalid \
                  arguments or a \
                  store without lock status."
)]
pub(crate) struct StatusArgs {
    /// Store URL [default: $DISTLOCK_URL, else sqlite:distlock.db in the working directory].
    #[arg(long, env = "DISTLOCK_URL", hide_env_values = true)]
    url: Option<String>,
    /// Every lock whose name starts with P ("" for all) instead of one NAME.
    #[arg(
        long,
        value_name = "P",
        env = "DISTLOCK_PREFIX",
        conflicts_with = "name"
    )]
    prefix: Option<String>,
    /// JSON instead of a table.
    #[arg(long, env = "DISTLOCK_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    json: bool,
    /// The lock's name.
    #[arg(required_unless_present = "prefix")]
    name: Option<String>,
}

/// Arguments of `distlock release`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Removes lock NAME whoever holds it and advances its fencing token in the same \
                  step: the old holder's next renewal finds it gone (its lost signal fires; \
                  `distlock exec` stops its command), and once the next holder has written to a \
                  fenced resource the old holder's writes are refused. Prints what it removed.\n\
                  Exit status: 0 if a holding was removed; 1 if the lock was not held (its \
                  token is advanced all the same); 69 if the store cannot be reached or fails; 64 \
                  for \
                  invalid arguments, a missing --force, or a store without forced release."
)]
pub(crate) struct ReleaseArgs {
    /// Store URL [default: $DISTLOCK_URL, else sqlite:distlock.db in the working directory].
    #[arg(long, env = "DISTLOCK_URL", hide_env_values = true)]
    url: Option<String>,
    /// Required: a forced release takes the lock from a holder that may still be working.
    #[arg(long)]
    force: bool,
    /// Which flavour of lock NAME: lock, fair, read, write or semaphore (every permit).
    #[arg(long, default_value = "lock", value_parser = parse_kind)]
    kind: LockKind,
    /// JSON instead of text.
    #[arg(long, env = "DISTLOCK_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    json: bool,
    /// The lock's name.
    name: String,
}

fn parse_kind(kind: &str) -> Result<LockKind, String> {
    match kind {
        "lock" | "mutex" => Ok(LockKind::Mutex),
        "fair" => Ok(LockKind::Fair),
        "read" => Ok(LockKind::Read),
        "write" => Ok(LockKind::Write),
        "semaphore" | "permit" => Ok(LockKind::Permit { permits: 1 }),
        other => Err(format!(
            "{other:?} is not a kind of lock (lock, fair, read, write, semaphore)"
        )),
    }
}

/// The locks as JSON: what `status --json` prints and `serve` answers at `/api/locks` (the
/// library's serde form of [`LockStatus`]).
pub(crate) fn locks_json(locks: &[LockStatus]) -> Value {
    to_json(&locks)
}

/// `value` as JSON. The status types serialize to plain numbers, strings and maps, which cannot
/// fail; `null` stands in should a future field not.
fn to_json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn holder_text(h: &Holding) -> String {
    match &h.holder {
        Some(w) => format!("pid {} on {} ({})", w.pid, w.host, w.process),
        None => "unknown".into(),
    }
}

fn since_text(h: &Holding) -> String {
    let Some(since) = h.since else {
        return "-".into();
    };
    let age = SystemTime::now()
        .duration_since(since)
        .unwrap_or(Duration::ZERO);
    format!(
        "{} ({} ago)",
        humantime::format_rfc3339_seconds(since),
        humantime::format_duration(Duration::from_secs(age.as_secs()))
    )
}

fn lease_text(h: &Holding) -> String {
    match h.lease_left {
        Some(left) => format!("{:.1}s", left.as_secs_f64()),
        None => "session".into(),
    }
}

fn print_table(locks: &[LockStatus]) {
    let mut rows = vec![
        [
            "NAME",
            "KIND",
            "TOKEN",
            "HOLDER",
            "SINCE",
            "LEASE LEFT",
            "WAITERS",
        ]
        .map(String::from),
    ];
    for s in locks {
        let waiters = s.waiters.map_or("-".into(), |w| w.to_string());
        if s.holdings.is_empty() {
            rows.push([
                s.name.clone(),
                s.kind.short_name(),
                "-".into(),
                "(free)".into(),
                "-".into(),
                "-".into(),
                waiters.clone(),
            ]);
        }
        for h in &s.holdings {
            rows.push([
                s.name.clone(),
                s.kind.short_name(),
                h.token.to_string(),
                holder_text(h),
                since_text(h),
                lease_text(h),
                waiters.clone(),
            ]);
        }
    }
    let widths: Vec<usize> = (0..7)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}

pub(crate) async fn run_status(args: StatusArgs) -> ExitCode {
    let url = args.url.as_deref().unwrap_or(distlock::DEFAULT_URL);
    let client = match connect(url, Patience::Once, |_, _| {}).await {
        Ok(c) => c,
        Err(e) => return failed("cannot read the locks", &e),
    };
    let found = match (&args.prefix, &args.name) {
        (Some(prefix), _) => client.status_prefix(prefix).await,
        (None, Some(name)) => client.status(name).await,
        (None, None) => unreachable!("clap requires NAME without --prefix"),
    };
    let locks = match found {
        Ok(locks) => locks,
        Err(e) => return failed("cannot read the locks", &e),
    };
    // On stderr, in both forms: the JSON on stdout stays the array it always was.
    for warning in client.warnings().await {
        eprintln!("distlock: warning: {warning}");
    }
    client.shutdown().await;
    if args.json {
        println!("{}", locks_json(&locks));
    } else if locks.is_empty() {
        match &args.name {
            Some(name) if args.prefix.is_none() => eprintln!("distlock: {name:?} is not held"),
            _ => eprintln!("distlock: no lock is held"),
        }
    } else {
        print_table(&locks);
    }
    let held = locks.iter().any(|s| !s.holdings.is_empty());
    if held || args.prefix.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn forced_json(name: &str, kind: LockKind, forced: &ForcedRelease) -> Value {
    let mut json = to_json(forced);
    if let Value::Object(fields) = &mut json {
        fields.insert("name".into(), name.into());
        fields.insert("kind".into(), kind.short_name().into());
    }
    json
}

pub(crate) async fn run_release(args: ReleaseArgs) -> ExitCode {
    if !args.force {
        eprintln!(
            "distlock: release takes lock {:?} from whoever holds it, even a holder still at \
             work; say --force to do it (see --help)",
            args.name
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let url = args.url.as_deref().unwrap_or(distlock::DEFAULT_URL);
    let client = match connect(url, Patience::Once, |_, _| {}).await {
        Ok(c) => c,
        Err(e) => return failed("cannot release the lock", &e),
    };
    let forced = match client.force_release(&args.name, args.kind).await {
        Ok(forced) => forced,
        Err(e) => return failed("cannot release the lock", &e),
    };
    client.shutdown().await;
    if args.json {
        println!("{}", forced_json(&args.name, args.kind, &forced));
    } else {
        for h in &forced.removed {
            println!(
                "removed {} {:?}: token {}, held by {}, since {}",
                args.kind.short_name(),
                args.name,
                h.token,
                holder_text(h),
                since_text(h)
            );
        }
        if forced.removed.is_empty() {
            println!(
                "{} {:?} was not held; nothing removed",
                args.kind.short_name(),
                args.name
            );
        }
        println!("fencing token advanced to {}", forced.fence);
    }
    if forced.removed.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
