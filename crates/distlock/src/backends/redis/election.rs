//! Election records in Redis (`scripts/elect_write.lua`, `scripts/elect_read.lua`): a hash with
//! the latest entry and the largest term, a key whose TTL says whether the leader is live, and a
//! sorted set with the last entries (the log observers read). Every key of one election carries
//! the hash tag `{name}`, so each script touches one cluster slot. A new entry is published on
//! the election's channel with the payload `*`, which wakes every watcher of this client.

use std::time::Duration;

use super::invoke::Server;
use super::scripts::SCRIPTS;
use crate::backend::{ELECTION_LOG_KEEP, ElectionEntry, Wakeups};
use crate::error::{Error, ErrorKind, Result};
use crate::types::{FencingToken, LockName};

/// `<prefix>distlock:{family}:{name}` with the name's braces (and `%`) escaped, so the hash tag
/// is always the whole name, as `keys.rs` does for locks.
pub(super) fn tagged(prefix: &str, family: &str, name: &LockName) -> String {
    let mut base = format!("{prefix}distlock:{family}:{{");
    for c in name.as_str().chars() {
        match c {
            '%' => base.push_str("%25"),
            '{' => base.push_str("%7B"),
            '}' => base.push_str("%7D"),
            c => base.push(c),
        }
    }
    base.push('}');
    base
}

struct Keys {
    base: String,
}

impl Keys {
    fn new(prefix: &str, election: &LockName) -> Self {
        Keys {
            base: tagged(prefix, "elect", election),
        }
    }

    fn all(&self) -> Vec<String> {
        vec![
            format!("{}:rec", self.base),
            format!("{}:alive", self.base),
            format!("{}:log", self.base),
        ]
    }

    fn channel(&self) -> String {
        format!("{}:changed", self.base)
    }
}

/// See [`crate::backend::Elections::elect_write`].
pub(super) async fn write(
    server: &Server,
    election: &LockName,
    term: FencingToken,
    value: Option<&str>,
    ttl: Duration,
) -> Result<bool> {
    let k = Keys::new(&server.prefix, election);
    let (term, ttl, keep) = (
        term.get().to_string(),
        ttl.as_millis().max(1).to_string(),
        ELECTION_LOG_KEEP.to_string(),
    );
    let channel = k.channel();
    let has = if value.is_some() { "1" } else { "0" };
    let args = [&term, has, value.unwrap_or(""), &ttl, &channel, &keep];
    let args: Vec<&str> = args.iter().map(|a| a.as_ref()).collect();
    let written: i64 = server
        .run(
            &SCRIPTS.elect_write,
            &k.all(),
            &args,
            "writing the election record",
        )
        .await?;
    Ok(written == 1)
}

/// Reads the live leader (`"current"`), the latest entry (`"latest"`) or the entries after a
/// seq.
pub(super) async fn read(
    server: &Server,
    election: &LockName,
    what: &str,
) -> Result<Vec<ElectionEntry>> {
    let k = Keys::new(&server.prefix, election);
    let entries: Vec<String> = server
        .run(
            &SCRIPTS.elect_read,
            &k.all(),
            &[what],
            "reading the election record",
        )
        .await?;
    entries.iter().map(|e| parse(e)).collect()
}

/// `seq:term:has:value` (the value may contain `:`).
fn parse(entry: &str) -> Result<ElectionEntry> {
    let mut parts = entry.splitn(4, ':');
    let (seq, term, has, value) = (parts.next(), parts.next(), parts.next(), parts.next());
    match (
        seq.and_then(|s| s.parse::<u64>().ok()),
        term.and_then(|t| t.parse::<u64>().ok()),
        has,
    ) {
        (Some(seq), Some(term), Some(has)) => Ok(ElectionEntry::new(
            seq,
            FencingToken(term),
            (has == "1").then(|| value.unwrap_or("").to_string()),
        )),
        _ => Err(Error::new(
            ErrorKind::Backend,
            "an election log entry that is not seq:term:has:value",
        )
        .with_backend(super::NAME)),
    }
}

/// Wake-ups for new entries of `election`.
pub(super) async fn watch(server: &Server, election: &LockName) -> Wakeups {
    server
        .subscriber
        .watch(Keys::new(&server.prefix, election).channel(), None)
        .await
}
