//! What a status shows and what a forced release removes, read off the lock's key range by the
//! same rules its contenders apply (see [`keys`](super::keys)).
//!
//! A holding's token is its key's create revision; its holder and `since` (when the key was put,
//! by the putting process's clock: etcd keeps no time per revision) come from the contender
//! entry in the key's value; it has no lease of its own (the session's lease keeps it). A forced
//! release deletes the holders' keys in one transaction, compared on their create revisions,
//! that also reads the oldest key left: the transaction's revision is above every removed key's
//! create revision and below every key put later.

use std::collections::BTreeMap;
use std::sync::Arc;

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp};

use super::keys::{LockKeys, Range, escape, parse_key, parse_size_key};
use super::{Inner, NAME, from_etcd};
use crate::backends::queues::records::decode_contender;
use crate::error::{Error, ErrorKind, Result};
use crate::status::{ForcedRelease, Holding, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName};

/// How many times a forced release reads the range again after a holder's key changed first.
const RACES: u32 = 10;

/// Keys under a prefix, oldest first.
fn oldest_first() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
}

/// See [`crate::backend::Inspection::status`]: one range read of every key the selection can reach.
pub(super) async fn status(inner: &Arc<Inner>, which: &Selection) -> Result<Vec<LockStatus>> {
    let url_prefix = &inner.config.prefix;
    let start = match which {
        Selection::Name(name) => escape(name.as_str()).into_owned(),
        Selection::Prefix(prefix) => escape(prefix).into_owned(),
    };
    let answer = inner
        .get(
            "reading the locks' keys",
            &format!("{url_prefix}{start}"),
            Some(oldest_first()),
        )
        .await?;
    // Each lock range's keys, still oldest first; the semaphores' sizes (their keys are in
    // the same read: each is its range's name without the `/`).
    let mut ranges: BTreeMap<(String, Range), Vec<KeyValue>> = BTreeMap::new();
    let mut sizes: BTreeMap<String, u32> = BTreeMap::new();
    for kv in answer.kvs() {
        let Some(key) = kv
            .key_str()
            .ok()
            .and_then(|k| k.strip_prefix(url_prefix.as_str()))
        else {
            continue;
        };
        if let Some((name, range)) = parse_key(key)
            && which.matches(&name)
        {
            ranges.entry((name, range)).or_default().push(kv.clone());
        } else if let Some(name) = parse_size_key(key)
            && let Some(size) = super::waiter::size_of(Some(kv))?
        {
            sizes.insert(name, size);
        }
    }
    let mut statuses = Vec::new();
    for ((name, range), kvs) in ranges {
        // A name no lock can have (too long, say) is nobody's lock.
        let Ok(name) = LockName::new(name) else {
            continue;
        };
        let permits = match sizes.get(name.as_str()) {
            Some(size) => *size,
            None => recorded_permits(&kvs),
        };
        for kind in range.kinds(permits) {
            let keys = LockKeys::new(url_prefix, &name, kind);
            let (holders, waiters) = keys.holders(&kvs);
            if holders.is_empty() && waiters == 0 {
                continue;
            }
            let mut status = LockStatus::new(name.as_str(), kind);
            status.holdings = holders.into_iter().map(holding).collect();
            status.waiters = Some(waiters);
            statuses.push(status);
        }
    }
    Ok(statuses)
}

/// The permit count the semaphore's oldest key recorded, for a semaphore without a size key (of
/// a distlock version that kept none; every holder of one semaphore used the same): 0 if none
/// did (a status then cannot tell its holders).
fn recorded_permits(kvs: &[KeyValue]) -> u32 {
    kvs.first()
        .and_then(|kv| decode_contender(kv.value()).permits)
        .unwrap_or(0)
}

fn holding(kv: &KeyValue) -> Holding {
    let entry = decode_contender(kv.value());
    let mut holding =
        Holding::new(FencingToken(kv.create_revision() as u64)).since_unix_ms(entry.since_ms);
    holding.holder = entry.holder;
    holding
}

/// See [`crate::backend::Inspection::force_release`].
pub(super) async fn force_release(
    inner: &Arc<Inner>,
    name: &LockName,
    kind: LockKind,
) -> Result<ForcedRelease> {
    for _ in 0..RACES {
        let mut keys = LockKeys::new(&inner.config.prefix, name, kind);
        let range = keys.range().to_string();
        let read = inner
            .get("reading the lock's keys", &range, Some(oldest_first()))
            .await?;
        if let LockKind::Permit { permits: asked } = kind {
            // Whatever count the caller gave, the holders are the oldest N of the size kept
            // (or, without one, of the count the holders recorded).
            let size_key = keys.size_key().unwrap_or_default().to_string();
            let kept = inner
                .get("reading a semaphore's size", &size_key, None)
                .await?;
            let permits = match super::waiter::size_of(kept.kvs().first())? {
                Some(size) => size,
                None => match recorded_permits(read.kvs()) {
                    0 => asked,
                    recorded => recorded,
                },
            };
            keys.with_permits(permits);
        }
        let (holders, _) = keys.holders(read.kvs());
        let when: Vec<Compare> = holders
            .iter()
            .map(|kv| Compare::create_revision(kv.key(), CompareOp::Equal, kv.create_revision()))
            .collect();
        let mut then: Vec<TxnOp> = holders
            .iter()
            .map(|kv| TxnOp::delete(kv.key(), None))
            .collect();
        // The oldest key left may hold next with the token it has, older than the deletion.
        then.push(TxnOp::get(range, Some(oldest_first().with_limit(1))));
        let txn = Txn::new().when(when).and_then(then);
        // Not sent again on a connection fault: had it landed, the holdings it removed would be
        // reported as never there.
        let answer = inner
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(from_etcd("forcing a release"))?;
        if !answer.succeeded() {
            continue; // A holder's key went (or came back anew) meanwhile: read again.
        }
        let deleted_at = answer.header().map_or(0, |h| h.revision());
        let next = answer
            .op_responses()
            .into_iter()
            .last()
            .and_then(|op| match op {
                etcd_client::TxnOpResponse::Get(get) => {
                    get.kvs().first().map(|kv| kv.create_revision())
                }
                _ => None,
            });
        let fence = next.map_or(deleted_at, |next| deleted_at.min(next - 1));
        let removed = holders.into_iter().map(holding).collect();
        return Ok(ForcedRelease::new(removed, FencingToken(fence as u64)));
    }
    Err(Error::new(
        ErrorKind::Backend,
        format!("lock {name:?}: its holders changed under {RACES} forced releases in a row"),
    )
    .with_backend(NAME))
}
