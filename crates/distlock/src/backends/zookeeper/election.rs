//! Election records in ZooKeeper. One election is the persistent node `<chroot>/<name>%elect`
//! (the name escaped as lock names are, so it reaches no lock's node) with:
//!
//! * its data: the latest entry, `seq:term:has:value` (`has` is `1` while a leader's value
//!   stands, `0` once it resigned); its term is the largest ever written, since a write below
//!   it is refused;
//! * `log-<seq>` children (persistent, the seq zero-padded to 20 digits): the last
//!   [`ELECTION_LOG_KEEP`] entries, which observers read;
//! * `alive`: an **ephemeral** child of the session that wrote the latest entry, holding that
//!   entry's seq. ZooKeeper has no clock a client can set a deadline by, so the record's `ttl` is
//!   not used: the record is live while that session lasts, exactly as the leader's hold of the
//!   election's lock (an ephemeral node of the same session) is. A crashed leader's record
//!   lapses with its session, when ZooKeeper expires it — the moment its lock is freed.
//!
//! Every write is one multi-op fenced by the record node's version (compare-and-set): the new
//! data, the new log node, the trimmed one, and the `alive` node replaced (by version) or
//! deleted. A write that lost a race reads again and retries. Watchers hold a one-shot data
//! watch on the record node, armed again at each event before it is delivered.

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client::{Acls, CreateMode, CreateOptions, MultiReadResult, MultiWriteError};

use super::nodes::escape;
use super::session::on_session;
use super::{EPHEMERAL, Inner, NAME, PARENT};
use crate::backend::{ELECTION_LOG_KEEP, ElectionEntry, Wakeups};
use crate::backends::queues::records::{decode_entry, encode_entry};
use crate::error::{Error, ErrorKind, Result};
use crate::types::{FencingToken, LockName};

/// The record and log nodes: persistent, open to every client.
const PERSISTENT: CreateOptions<'static> = CreateMode::Persistent.with_acls(Acls::anyone_all());
/// How many log nodes one multi-read fetches.
const READ_BATCH: u64 = 64;
/// How often a write that lost a compare-and-set race is tried again before giving up.
const RACES: u32 = 100;

/// The record's node of `election`.
pub(super) fn record_path(prefix: &str, election: &LockName) -> String {
    format!("{prefix}/{}%elect", escape(election.as_str()))
}

fn log_path(record: &str, seq: u64) -> String {
    format!("{record}/log-{seq:020}")
}

fn alive_path(record: &str) -> String {
    format!("{record}/alive")
}

fn alive_seq(data: &[u8]) -> Option<u64> {
    std::str::from_utf8(data).ok()?.parse().ok()
}

/// What one consistent read of the record saw.
struct Seen {
    /// The latest entry and the record node's version; `None` if there is no record yet.
    record: Option<(ElectionEntry, i32)>,
    /// The `alive` node: the seq it stands for, its owner session and version.
    alive: Option<(Option<u64>, i64, i32)>,
}

/// Reads the record and its `alive` node in one multi-read (one snapshot of one server).
async fn read(inner: &Inner, record: &str) -> Result<Seen> {
    let session = inner.sessions.get().await?;
    let alive = alive_path(record);
    let results = inner
        .retrying(&session, "reading the election record", |client| {
            let (record, alive) = (record.to_string(), alive.clone());
            async move {
                let mut reader = client.new_multi_reader();
                reader.add_get_data(&record)?;
                reader.add_get_data(&alive)?;
                reader.commit().await
            }
        })
        .await?;
    let mut results = results.into_iter();
    let record = match results.next() {
        Some(MultiReadResult::Data { data, stat }) => {
            Some((decode_entry(&data, NAME)?, stat.version))
        }
        _ => None,
    };
    let alive = match results.next() {
        Some(MultiReadResult::Data { data, stat }) => {
            Some((alive_seq(&data), stat.ephemeral_owner, stat.version))
        }
        _ => None,
    };
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
    let record = record_path(&inner.config.prefix, election);
    let alive = alive_path(&record);
    let until = crate::core::deadline::instant_after(inner.retry_for);
    for _ in 0..RACES {
        let seen = read(inner, &record).await?;
        let session = inner.sessions.get().await?;
        let client = session.client()?;
        let me = client.session_id().0;
        let mut multi = client.new_multi_writer();
        let seq = match &seen.record {
            None => {
                multi
                    .add_create(
                        &record,
                        encode_entry(1, term, value).as_bytes(),
                        &PERSISTENT,
                    )
                    .map_err(on_zk)?;
                1
            }
            Some((latest, version)) => {
                if term < latest.term {
                    return Ok(false);
                }
                let mine = matches!(seen.alive, Some((Some(s), owner, _)) if s == latest.seq && owner == me);
                // A value of this term stands, but the session that wrote it is over (the
                // leader's lock went with it): the term is over; nothing revives its record.
                if value.is_some() && term == latest.term && latest.value.is_some() && !mine {
                    return Err(Error::new(
                        ErrorKind::LeaseLost,
                        format!(
                            "election {election:?}: the record of term {term} lapsed with the \
                             ZooKeeper session that wrote it"
                        ),
                    )
                    .with_backend(NAME));
                }
                let changed = term > latest.term || latest.value.as_deref() != value;
                if !changed {
                    // A refresh: the record is live while the session is; nothing to write.
                    return Ok(true);
                }
                let seq = latest.seq + 1;
                multi
                    .add_set_data(
                        &record,
                        encode_entry(seq, term, value).as_bytes(),
                        Some(*version),
                    )
                    .map_err(on_zk)?;
                seq
            }
        };
        multi
            .add_create(
                &log_path(&record, seq),
                encode_entry(seq, term, value).as_bytes(),
                &PERSISTENT,
            )
            .map_err(on_zk)?;
        if seq > ELECTION_LOG_KEEP {
            multi
                .add_delete(&log_path(&record, seq - ELECTION_LOG_KEEP), None)
                .map_err(on_zk)?;
        }
        if let Some((_, _, version)) = seen.alive {
            multi.add_delete(&alive, Some(version)).map_err(on_zk)?;
        }
        if value.is_some() {
            multi
                .add_create(&alive, seq.to_string().as_bytes(), &EPHEMERAL)
                .map_err(on_zk)?;
        }
        match multi.commit().await {
            Ok(_) => return Ok(true),
            Err(MultiWriteError::OperationFailed { index, source }) => {
                use zookeeper_client::Error as Zk;
                match source {
                    // The record is not there yet and neither is its parent (the chroot).
                    Zk::NoNode if seen.record.is_none() && index == 0 => {
                        if let Some(parent) = record.rsplit_once('/').map(|(p, _)| p)
                            && !parent.is_empty()
                        {
                            match client.mkdir(parent, &PARENT).await {
                                Ok(()) | Err(Zk::NodeExists) => {}
                                Err(e) => return Err(on_session("creating the chroot", e)),
                            }
                        }
                    }
                    // Someone else wrote between the read and the write: read again.
                    Zk::NoNode | Zk::NodeExists | Zk::BadVersion => {}
                    // A trimmed log node already gone: trim nothing this time is not possible in
                    // one multi; it cannot happen while every write goes through here.
                    e => return Err(on_session("writing the election record", e)),
                }
            }
            Err(MultiWriteError::RequestFailed { source }) => {
                let e = on_session("writing the election record", source);
                // Safe to repeat: a write that landed reads back as unchanged and ours.
                if e.kind() != ErrorKind::Connection || tokio::time::Instant::now() >= until {
                    return Err(e);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    Err(Error::new(
        ErrorKind::Backend,
        format!("election {election:?}: the record changed under {RACES} writes in a row"),
    )
    .with_backend(NAME))
}

fn on_zk(e: zookeeper_client::Error) -> Error {
    on_session("preparing the election write", e)
}

/// See [`crate::backend::Elections::elect_current`]: the latest entry with a value, while its
/// `alive` node (its writer's session) stands.
pub(super) async fn current(inner: &Inner, election: &LockName) -> Result<Option<ElectionEntry>> {
    let record = record_path(&inner.config.prefix, election);
    let seen = read(inner, &record).await?;
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
    let record = record_path(&inner.config.prefix, election);
    let Some((latest, _)) = read(inner, &record).await?.record else {
        return Ok(Vec::new());
    };
    let Some(after) = after else {
        return Ok(vec![latest]);
    };
    if latest.seq <= after {
        return Ok(Vec::new());
    }
    let first = (after + 1).max(latest.seq.saturating_sub(ELECTION_LOG_KEEP) + 1);
    let session = inner.sessions.get().await?;
    let mut entries = Vec::new();
    let mut from = first;
    while from <= latest.seq {
        let to = (from + READ_BATCH - 1).min(latest.seq);
        let results = inner
            .retrying(&session, "reading the election log", |client| {
                let record = record.clone();
                async move {
                    let mut reader = client.new_multi_reader();
                    for seq in from..=to {
                        reader.add_get_data(&log_path(&record, seq))?;
                    }
                    reader.commit().await
                }
            })
            .await?;
        for result in results {
            // A log node trimmed meanwhile is skipped (the observer says it fell behind).
            if let MultiReadResult::Data { data, .. } = result {
                entries.push(decode_entry(&data, NAME)?);
            }
        }
        from = to + 1;
    }
    Ok(entries)
}

/// Wake-ups for every change of the node at `path` (its creation, data, deletion): a one-shot
/// watch, armed before this returns and again at each event before the event is delivered, so
/// a reader woken by it never misses a later change. A failed arming is tried again every
/// [`REARM`], with a wake-up each time (the reader reads again).
pub(super) async fn watch_node(inner: Arc<Inner>, path: String) -> Result<Wakeups> {
    let first = arm(&inner, &path).await?;
    let stream = futures_util::stream::unfold(
        (inner, path, Some(first)),
        |(inner, path, watcher)| async move {
            match watcher {
                Some(watcher) => {
                    watcher.changed().await;
                }
                None => tokio::time::sleep(REARM).await,
            }
            let next = arm(&inner, &path).await.ok();
            Some(((), (inner, path, next)))
        },
    );
    Ok(Box::pin(stream))
}

/// How long a watch that could not be armed waits before it tries again.
const REARM: Duration = Duration::from_millis(500);

async fn arm(inner: &Inner, path: &str) -> Result<zookeeper_client::OneshotWatcher> {
    let session = inner.sessions.get().await?;
    let client = session.client()?;
    let (_, watcher) = client
        .check_and_watch_stat(path)
        .await
        .map_err(|e| on_session("watching a node", e))?;
    Ok(watcher)
}
