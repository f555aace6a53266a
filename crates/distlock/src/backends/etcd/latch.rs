//! Count-down latches in etcd: the key `<prefix><name>%latch` (the name escaped as lock names
//! are) holds the count in decimal; no key means 0. Setting puts it only if it does not exist
//! (compare on create revision 0); each count-down is a transaction compared on the key's mod
//! revision (compare-and-set), and the one that reaches 0 deletes the key, so a finished latch
//! leaves nothing behind. A step that lost a race reads again. Waiters hold an etcd watch on the
//! key: every change wakes them, and they read the count again.

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};

use super::keys::escape;
use super::{Inner, NAME, from_etcd};
use crate::backend::Wakeups;
use crate::backends::queues::records::{decode_count, latch_raced};
use crate::error::Result;
use crate::types::LockName;

/// How often a step that lost a compare-and-set race is tried again before giving up.
const RACES: u32 = 1000;

fn key(prefix: &str, latch: &LockName) -> String {
    format!("{prefix}{}%latch", escape(latch.as_str()))
}

/// The count and the key's mod revision; `None` when there is no key (count 0).
async fn read(inner: &Inner, key: &str) -> Result<Option<(u64, i64)>> {
    let answer = inner.get("reading the latch", key, None).await?;
    match answer.kvs().first() {
        Some(kv) => Ok(Some((decode_count(kv.value(), NAME)?, kv.mod_revision()))),
        None => Ok(None),
    }
}

/// One transaction, not repeated on a connection fault (a step that landed must not be taken
/// twice): whether its compares held.
async fn once(inner: &Inner, what: &'static str, txn: Txn) -> Result<(bool, Vec<TxnOpResponse>)> {
    let answer = inner
        .client
        .kv_client()
        .txn(txn)
        .await
        .map_err(from_etcd(what))?;
    Ok((answer.succeeded(), answer.op_responses()))
}

/// See [`crate::backend::Latches::latch_set`].
pub(super) async fn set(inner: &Inner, latch: &LockName, count: u64) -> Result<bool> {
    let key = key(&inner.config.prefix, latch);
    for _ in 0..RACES {
        let (created, _) = once(
            inner,
            "setting the latch",
            Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key.clone(), count.to_string(), None)]),
        )
        .await?;
        if created {
            return Ok(true);
        }
        match read(inner, &key).await? {
            None => continue,
            Some((n, _)) if n > 0 => return Ok(false),
            // A key left at 0 (not written by this backend, which deletes it at 0).
            Some((_, revision)) => {
                let (set, _) = once(
                    inner,
                    "setting the latch",
                    Txn::new()
                        .when([Compare::mod_revision(
                            key.clone(),
                            CompareOp::Equal,
                            revision,
                        )])
                        .and_then([TxnOp::put(key.clone(), count.to_string(), None)]),
                )
                .await?;
                if set {
                    return Ok(true);
                }
            }
        }
    }
    Err(latch_raced(latch, RACES, NAME))
}

/// See [`crate::backend::Latches::latch_count_down`].
pub(super) async fn count_down(inner: &Inner, latch: &LockName) -> Result<u64> {
    let key = key(&inner.config.prefix, latch);
    for _ in 0..RACES {
        let Some((count, revision)) = read(inner, &key).await? else {
            return Ok(0);
        };
        let after = count.saturating_sub(1);
        let step = if after == 0 {
            TxnOp::delete(key.clone(), None)
        } else {
            TxnOp::put(key.clone(), after.to_string(), None)
        };
        let (done, _) = once(
            inner,
            "counting the latch down",
            Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then([step]),
        )
        .await?;
        if done {
            return Ok(after);
        }
    }
    Err(latch_raced(latch, RACES, NAME))
}

/// See [`crate::backend::Latches::latch_count`].
pub(super) async fn count(inner: &Inner, latch: &LockName) -> Result<u64> {
    let key = key(&inner.config.prefix, latch);
    Ok(read(inner, &key).await?.map_or(0, |(count, _)| count))
}

/// Wake-ups for every change of the latch's key (the last count-down deletes it).
pub(super) async fn watch(inner: &Inner, latch: &LockName) -> Result<Wakeups> {
    super::election::watch_key(inner, key(&inner.config.prefix, latch)).await
}
