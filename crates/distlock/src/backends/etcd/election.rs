//! Election records in etcd, under `<prefix><name>%elect/` (the name escaped as lock names are,
//! so no lock's range holds them):
//!
//! * `rec`: the latest entry, `seq:term:has:value` (`has` is `1` while a leader's value stands,
//!   `0` once it resigned); its term is the largest ever written, since a write below it is
//!   refused;
//! * `log/<seq>` (the seq zero-padded to 20 digits): the last [`ELECTION_LOG_KEEP`] entries,
//!   which observers read;
//! * `alive`: the latest entry's seq, **attached to the lease of the session that wrote it**.
//!   The record's `ttl` is not used: the record is live while that session's lease is, which is
//!   the lease the leader's hold of the election's lock is attached to, so a crashed leader's
//!   record lapses when etcd expires its lease (the URL's `ttl`) — the moment its lock is freed.
//!
//! Every write is one transaction compared on the `rec` and `alive` keys' mod revisions
//! (compare-and-set): the new `rec`, the new log key, the trimmed one, `alive` put on this
//! session's lease or deleted. A write that lost a race reads again and retries. Watchers hold an
//! etcd watch on `rec` (on the latch's key for latches).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};

use super::keys::escape;
use super::{Inner, NAME, from_etcd};
use crate::backend::{ELECTION_LOG_KEEP, ElectionEntry, Wakeups};
use crate::backends::queues::records::{decode_entry, encode_entry};
use crate::error::{Error, ErrorKind, Result};
use crate::types::{FencingToken, LockName};

/// How many log entries one read fetches.
const READ_BATCH: i64 = 64;
/// How often a write that lost a compare-and-set race is tried again before giving up.
const RACES: u32 = 100;

struct Keys {
    base: String,
}

impl Keys {
    fn new(prefix: &str, election: &LockName) -> Self {
        Keys {
            base: format!("{prefix}{}%elect/", escape(election.as_str())),
        }
    }
    fn rec(&self) -> String {
        format!("{}rec", self.base)
    }
    fn alive(&self) -> String {
        format!("{}alive", self.base)
    }
    fn log(&self, seq: u64) -> String {
        format!("{}log/{seq:020}", self.base)
    }
    /// The end of the log's range: `log0` (`'0'` follows `'/'`).
    fn log_end(&self) -> String {
        format!("{}log0", self.base)
    }
}

fn first_kv(op: Option<TxnOpResponse>) -> Option<KeyValue> {
    match op {
        Some(TxnOpResponse::Get(mut get)) => get.take_kvs().into_iter().next(),
        _ => None,
    }
}

/// What one read of the record saw (one transaction: one revision).
struct Seen {
    /// The latest entry and `rec`'s mod revision.
    record: Option<(ElectionEntry, i64)>,
    /// `alive`: the seq it stands for, its lease, its mod revision.
    alive: Option<(Option<u64>, i64, i64)>,
}

async fn read(inner: &Inner, keys: &Keys) -> Result<Seen> {
    let txn = Txn::new().and_then([TxnOp::get(keys.rec(), None), TxnOp::get(keys.alive(), None)]);
    let answer = inner.txn("reading the election record", txn).await?;
    let mut ops = answer.op_responses().into_iter();
    let record = match first_kv(ops.next()) {
        Some(kv) => Some((decode_entry(kv.value(), NAME)?, kv.mod_revision())),
        None => None,
    };
    let alive = first_kv(ops.next()).map(|kv| {
        let seq = std::str::from_utf8(kv.value())
            .ok()
            .and_then(|s| s.parse().ok());
        (seq, kv.lease(), kv.mod_revision())
    });
    Ok(Seen { record, alive })
}

/// See [`crate::backend::Elections::elect_write`]; `ttl` is not used (see the module's doc).
pub(super) async fn write(
    inner: &Arc<Inner>,
    election: &LockName,
    term: FencingToken,
    value: Option<&str>,
    _ttl: Duration,
) -> Result<bool> {
    let keys = Keys::new(&inner.config.prefix, election);
    for _ in 0..RACES {
        let seen = read(inner, &keys).await?;
        let session = inner.session().await?;
        let mut when = Vec::new();
        let seq = match &seen.record {
            None => {
                when.push(Compare::create_revision(keys.rec(), CompareOp::Equal, 0));
                1
            }
            Some((latest, revision)) => {
                if term < latest.term {
                    return Ok(false);
                }
                let mine = matches!(seen.alive, Some((Some(s), lease, _)) if s == latest.seq && lease == session.id);
                // A value of this term stands, but the lease that kept it is gone (the leader's
                // lock went with it): the term is over; nothing revives its record.
                if value.is_some() && term == latest.term && latest.value.is_some() && !mine {
                    return Err(Error::new(
                        ErrorKind::LeaseLost,
                        format!(
                            "election {election:?}: the record of term {term} lapsed with the \
                             etcd lease that kept it"
                        ),
                    )
                    .with_backend(NAME));
                }
                if term == latest.term && latest.value.as_deref() == value {
                    // A refresh: the record is live while the lease is; nothing to write.
                    return Ok(true);
                }
                when.push(Compare::mod_revision(
                    keys.rec(),
                    CompareOp::Equal,
                    *revision,
                ));
                latest.seq + 1
            }
        };
        match seen.alive {
            None => when.push(Compare::create_revision(keys.alive(), CompareOp::Equal, 0)),
            Some((_, _, revision)) => {
                when.push(Compare::mod_revision(
                    keys.alive(),
                    CompareOp::Equal,
                    revision,
                ));
            }
        }
        let entry = encode_entry(seq, term, value);
        let mut ops = vec![
            TxnOp::put(keys.rec(), entry.clone(), None),
            TxnOp::put(keys.log(seq), entry, None),
        ];
        if seq > ELECTION_LOG_KEEP {
            ops.push(TxnOp::delete(keys.log(seq - ELECTION_LOG_KEEP), None));
        }
        if value.is_some() {
            ops.push(TxnOp::put(
                keys.alive(),
                seq.to_string(),
                Some(PutOptions::new().with_lease(session.id)),
            ));
        } else {
            ops.push(TxnOp::delete(keys.alive(), None));
        }
        // Repeated on a connection fault: a write that landed fails its compares, and the next
        // read finds it unchanged and ours.
        let answer = inner
            .txn(
                "writing the election record",
                Txn::new().when(when).and_then(ops),
            )
            .await?;
        if answer.succeeded() {
            return Ok(true);
        }
    }
    Err(Error::new(
        ErrorKind::Backend,
        format!("election {election:?}: the record changed under {RACES} writes in a row"),
    )
    .with_backend(NAME))
}

/// See [`crate::backend::Elections::elect_current`]: the latest entry with a value while `alive`
/// (its writer's lease) stands for it.
pub(super) async fn current(inner: &Inner, election: &LockName) -> Result<Option<ElectionEntry>> {
    let keys = Keys::new(&inner.config.prefix, election);
    let seen = read(inner, &keys).await?;
    Ok(crate::backends::queues::records::live_leader(
        seen.record.map(|(entry, _)| entry),
        seen.alive.and_then(|(seq, _, _)| seq),
    ))
}

/// See [`crate::backend::Elections::elect_log`].
pub(super) async fn log(
    inner: &Inner,
    election: &LockName,
    after: Option<u64>,
) -> Result<Vec<ElectionEntry>> {
    let keys = Keys::new(&inner.config.prefix, election);
    let Some(after) = after else {
        return Ok(read(inner, &keys)
            .await?
            .record
            .map(|(entry, _)| vec![entry])
            .unwrap_or_default());
    };
    let mut entries = Vec::new();
    let mut from = after + 1;
    loop {
        let options = GetOptions::new()
            .with_range(keys.log_end())
            .with_limit(READ_BATCH);
        let mut answer = inner
            .get("reading the election log", &keys.log(from), Some(options))
            .await?;
        let more = answer.more();
        let kvs = answer.take_kvs();
        for kv in &kvs {
            let entry = decode_entry(kv.value(), NAME)?;
            from = entry.seq + 1;
            entries.push(entry);
        }
        if !more || kvs.is_empty() {
            return Ok(entries);
        }
    }
}

/// Wake-ups for every change of `key`: an etcd watch, created before this returns.
pub(super) async fn watch_key(inner: &Inner, key: String) -> Result<Wakeups> {
    let what = "watching the election record";
    let mut stream = inner
        .watch(what, key.as_bytes(), WatchOptions::new())
        .await?;
    // The "created" answer: from here on no change is missed.
    let created = stream.message().await.map_err(from_etcd(what))?;
    if !created.is_some_and(|c| c.created() && !c.canceled()) {
        return Ok(Box::pin(futures_util::stream::empty()));
    }
    let wakeups = futures_util::stream::unfold(stream, |mut stream| async move {
        loop {
            match stream.message().await {
                Ok(Some(answer)) if !answer.canceled() => {
                    if answer.events().is_empty() {
                        // A progress notice.
                        continue;
                    }
                    return Some(((), stream));
                }
                // The watch ended: the core's timer takes over.
                _ => return None,
            }
        }
    });
    Ok(Box::pin(wakeups))
}

/// See [`crate::backend::Elections::watch_election`].
pub(super) async fn watch(inner: &Inner, election: &LockName) -> Result<Wakeups> {
    let keys = Keys::new(&inner.config.prefix, election);
    watch_key(inner, keys.rec()).await
}
