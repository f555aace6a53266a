//! Lock status and forced release: `scripts/status.lua` and `scripts/force_release.lua` (both
//! after `scripts/holdings.lua`), run on one server here and on each master by Redlock, which
//! merges what the masters answer with the pieces below.

use std::collections::BTreeSet;

use crate::error::{Error, ErrorKind, Result};
use crate::status::{ForcedRelease, Holding, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName};

use super::NAME;
use super::invoke::Server;
use super::keys::{self, Keys};
use super::scripts::SCRIPTS;

/// Which side of a lock a holding is: the writer (or the one holder of an exclusive lock), or
/// one of the readers or permit holders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Exclusive,
    Shared,
}

/// One family of a lock's keys as one server answered for it.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// The fencing counter (the last token drawn), or after a forced release, where it moved to.
    pub(crate) counter: Option<u64>,
    /// How many wait, where the family keeps waiters.
    pub(crate) waiters: Option<u64>,
    pub(crate) holdings: Vec<(Side, Holding)>,
}

/// The flavour whose keys are of `family` (a semaphore's size is read apart: 0 here).
fn kind_of(family: &str) -> LockKind {
    match family {
        "fair" => LockKind::Fair,
        "rw" => LockKind::Write,
        "sem" => LockKind::Permit { permits: 0 },
        _ => LockKind::Mutex,
    }
}

/// The side `force_release.lua` removes for `kind` ('w' the writer or exclusive holder).
fn side_arg(kind: LockKind) -> &'static str {
    if kind == LockKind::Read { "r" } else { "w" }
}

/// Reads the reply of `status.lua` or `force_release.lua`: counter, waiters, then five strings
/// per holding (see `holdings.lua`).
pub(crate) fn decode(reply: Vec<String>, what: &str) -> Result<Found> {
    let bad = || {
        Error::new(
            ErrorKind::Backend,
            format!("{what}: the server's answer is not a lock's status"),
        )
        .with_backend(NAME)
    };
    let number = |s: &str| -> Result<Option<u64>> {
        if s.is_empty() {
            Ok(None)
        } else {
            s.parse().map(Some).map_err(|_| bad())
        }
    };
    if reply.len() < 2 || !(reply.len() - 2).is_multiple_of(5) {
        return Err(bad());
    }
    let mut found = Found {
        counter: number(&reply[0])?,
        waiters: number(&reply[1])?,
        holdings: Vec::with_capacity((reply.len() - 2) / 5),
    };
    for h in reply[2..].chunks_exact(5) {
        let side = if h[0] == "r" {
            Side::Shared
        } else {
            Side::Exclusive
        };
        let token = number(&h[1])?.ok_or_else(bad)?;
        let left: i64 = h[2].parse().map_err(|_| bad())?;
        let since = number(&h[3])?.and_then(|ms| i64::try_from(ms).ok());
        let record = (!h[4].is_empty()).then_some(h[4].as_str());
        let holding = Holding::new(FencingToken(token))
            .holder_record(record)
            .since_unix_ms(since)
            .lease_left_ms(left);
        found.holdings.push((side, holding));
    }
    Ok(found)
}

/// The statuses of `name`'s `family` from what was found: one per flavour (a read-write lock's
/// readers and writer apart). A flavour nobody holds or waits for is left out, unless its
/// family has a counter and nothing else shows (then the exclusive side carries the counter).
pub(crate) fn statuses(name: &str, family: &str, found: Found) -> Vec<LockStatus> {
    let last_token = found.counter.map(FencingToken);
    let side = |kind: LockKind, which: Side, waiters: Option<u64>| {
        let mut status = LockStatus::new(name, kind);
        status.holdings = found
            .holdings
            .iter()
            .filter(|(s, _)| *s == which)
            .map(|(_, h)| h.clone())
            .collect();
        status.waiters = waiters;
        status.last_token = last_token;
        status
    };
    let all = if family == "rw" {
        vec![
            side(LockKind::Read, Side::Shared, None),
            side(LockKind::Write, Side::Exclusive, found.waiters),
        ]
    } else {
        let which = if family == "sem" {
            Side::Shared
        } else {
            Side::Exclusive
        };
        vec![side(kind_of(family), which, found.waiters)]
    };
    let live = |s: &LockStatus| !s.holdings.is_empty() || s.waiters.is_some_and(|w| w > 0);
    if all.iter().any(live) {
        all.into_iter().filter(live).collect()
    } else if last_token.is_some() {
        all.into_iter().last().into_iter().collect()
    } else {
        Vec::new()
    }
}

/// The locks (family, name) a status of `which` reads: every family of the name, or what a
/// `SCAN` found (`scanned`: the keys, from any number of servers) under the prefix.
pub(crate) fn selected(
    key_prefix: &str,
    which: &Selection,
    scanned: &[String],
) -> BTreeSet<(&'static str, String)> {
    match which {
        Selection::Name(name) => keys::FAMILIES
            .into_iter()
            .map(|f| (f, name.as_str().to_string()))
            .collect(),
        _ => scanned
            .iter()
            .filter_map(|key| keys::parse_key(key_prefix, key))
            .filter(|(_, name)| which.matches(name))
            .collect(),
    }
}

/// The `SCAN` pattern a status of `which` needs (keys under `key_prefix`), if it needs one.
pub(crate) fn scan_pattern(key_prefix: &str, which: &Selection) -> Option<String> {
    match which {
        Selection::Name(_) => None,
        Selection::Prefix(prefix) => Some(keys::scan_pattern(key_prefix, prefix)),
    }
}

/// Runs `status.lua` for `name`'s `family` (a name a key gave back may not be a valid lock
/// name: such a lock is not distlock's, and shows nothing).
pub(crate) fn status_call(
    key_prefix: &str,
    family: &'static str,
    name: &str,
) -> Option<(Vec<String>, [&'static str; 1])> {
    let name = LockName::new(name).ok()?;
    Some((
        Keys::new(key_prefix, kind_of(family), &name).inspect(),
        [family],
    ))
}

/// The keys and arguments of `force_release.lua` for `name` of flavour `kind`.
pub(crate) fn force_call(
    key_prefix: &str,
    name: &LockName,
    kind: LockKind,
) -> (Vec<String>, [String; 3]) {
    let k = Keys::new(key_prefix, kind, name);
    let args = [
        keys::family(kind).to_string(),
        side_arg(kind).to_string(),
        k.channel(),
    ];
    (k.inspect(), args)
}

/// [`crate::backend::Inspection::status`] on one server.
pub(super) async fn status(server: &Server, which: &Selection) -> Result<Vec<LockStatus>> {
    let what = "reading lock status";
    let scanned = match scan_pattern(&server.prefix, which) {
        Some(pattern) => server.scan(&pattern, what).await?,
        None => Vec::new(),
    };
    let mut all = Vec::new();
    for (family, name) in selected(&server.prefix, which, &scanned) {
        let Some((keys, args)) = status_call(&server.prefix, family, &name) else {
            continue;
        };
        let reply: Vec<String> = server.run(&SCRIPTS.status, &keys, &args, what).await?;
        let mut found = statuses(&name, family, decode(reply, what)?);
        if family == "sem" && !found.is_empty() {
            // The size lives beside the holdings (in a key of its own, kept while the
            // semaphore is empty): one more read, for a semaphore that shows.
            if let Ok(sem) = LockName::new(&name) {
                let (size, _) = super::sem_count(server, &sem).await?;
                for status in &mut found {
                    status.kind = LockKind::Permit {
                        permits: size.unwrap_or(0),
                    };
                }
            }
        }
        all.extend(found);
    }
    Ok(all)
}

/// [`crate::backend::Inspection::force_release`] on one server.
pub(super) async fn force_release(
    server: &Server,
    name: &LockName,
    kind: LockKind,
) -> Result<ForcedRelease> {
    let what = "forcing a release";
    let (keys, args) = force_call(&server.prefix, name, kind);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let reply: Vec<String> = server
        .run(&SCRIPTS.force_release, &keys, &args, what)
        .await?;
    let found = decode(reply, what)?;
    let fence = found.counter.ok_or_else(|| {
        Error::new(
            ErrorKind::Backend,
            format!("{what}: no counter in the answer"),
        )
        .with_backend(NAME)
    })?;
    let removed = found.holdings.into_iter().map(|(_, h)| h).collect();
    Ok(ForcedRelease::new(removed, FencingToken(fence)))
}
