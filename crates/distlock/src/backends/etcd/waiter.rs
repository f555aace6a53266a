//! A contender's place in a lock's queue: its key. The first poll puts it (in one transaction
//! with reading the oldest contender, as etcd's `concurrency.Mutex` does); later polls only read.
//! A contender that is not the oldest watches the one key just older than its own for deletion,
//! and polls once more when the watch exists, so no release is missed and one release wakes one
//! waiter.
//!
//! A holding's key deleted by someone else (a forced release) ends it as its session's end does:
//! the session's keep-alive reads its holdings' keys (see [`session`](super::session)).

use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, WatchFilterType,
    WatchOptions, WatchStream,
};

use std::time::Duration;

use super::session::Session;
use super::{Holding, Inner, NAME, from_etcd};
use crate::backend::{Attempt, Hold, LockRequest, Waiter};
use crate::backends::etcd::keys::LockKeys;
use crate::backends::text_records::{contender_of, encode_contender};
use crate::error::{Error, ErrorKind, Result};
use crate::types::{FencingToken, LockKind};

/// This contender's key, named before it is put (so a put whose answer was lost is found again
/// and removed), and the create revision etcd gave it (its fencing token once it holds).
struct Place {
    session: Arc<Session>,
    key: String,
    /// `None` until an answer showed the key in etcd.
    revision: Option<i64>,
}

pub(super) struct EtcdWaiter {
    inner: Arc<Inner>,
    req: LockRequest,
    keys: LockKeys,
    place: Option<Place>,
    /// Whose deletion is worth a new poll.
    wait_for: Option<Watched>,
    watching: Option<(Watched, WatchStream)>,
}

impl EtcdWaiter {
    pub(super) fn new(inner: Arc<Inner>, req: LockRequest) -> Self {
        let keys = LockKeys::new(&inner.config.prefix, &req.name, req.kind);
        EtcdWaiter {
            inner,
            req,
            keys,
            place: None,
            wait_for: None,
            watching: None,
        }
    }

    /// Puts this contender's key (or finds it, if an earlier put's answer was lost), in one
    /// transaction with reading the oldest contender. Answers that read and its revision.
    async fn take_place(&mut self) -> Result<(Vec<KeyValue>, i64)> {
        let place = match self.place.take() {
            Some(p) if !p.session.is_over() => p,
            _ => {
                let session = self.inner.session().await?;
                let key = self.keys.contender(session.id, self.inner.next_contender());
                Place {
                    session,
                    key,
                    revision: None,
                }
            }
        };
        let (key, lease) = (place.key.clone(), place.session.id);
        self.place = Some(place);
        let owner = self.req.owner.as_str();
        let permits = match self.req.kind {
            LockKind::Permit { permits } => permits,
            _ => 0,
        };
        // The owner token (how this client knows its key again), and who put it, for a status.
        let value = encode_contender(owner, permits);
        let put = PutOptions::new().with_lease(lease);
        let (blockers, options) = self.keys.holder_read();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(key.clone(), value, Some(put)),
                TxnOp::get(blockers.clone(), Some(options.clone())),
            ])
            .or_else([
                TxnOp::get(key.clone(), None),
                TxnOp::get(blockers, Some(options)),
            ]);
        let answer = self
            .inner
            .txn_alone("taking a place in the lock's queue", txn)
            .await?;
        let read_at = answer.header().map_or(0, |h| h.revision());
        let mut ops = answer.op_responses().into_iter();
        let first = ops.next();
        let revision = if answer.succeeded() {
            read_at
        } else {
            // The key is this waiter's alone: it is there because an earlier put landed.
            match kvs(first).into_iter().next() {
                Some(kv) if contender_of(kv.value(), owner) => kv.create_revision(),
                _ => {
                    return Err(Error::new(
                        ErrorKind::Backend,
                        format!("the contender key {key:?} holds another owner's token"),
                    )
                    .with_backend(NAME));
                }
            }
        };
        if let Some(place) = self.place.as_mut() {
            place.revision = Some(revision);
        }
        Ok((kvs(ops.next()), read_at))
    }

    /// Reads again whether this contender's key is still there and which one is oldest. `None`
    /// when the key is gone (its session's lease ended in etcd, or it was deleted by hand).
    async fn read_queue(&mut self) -> Result<Option<(Vec<KeyValue>, i64)>> {
        let Some((key, revision)) = self
            .place
            .as_ref()
            .and_then(|p| Some((p.key.clone(), p.revision?)))
        else {
            return Ok(None);
        };
        let (blockers, options) = self.keys.holder_read();
        let txn = Txn::new().and_then([TxnOp::get(key, None), TxnOp::get(blockers, Some(options))]);
        let answer = self.inner.txn("reading the lock's queue", txn).await?;
        let read_at = answer.header().map_or(0, |h| h.revision());
        let mut ops = answer.op_responses().into_iter();
        let mine = kvs(ops.next());
        if !mine.iter().any(|kv| kv.create_revision() == revision) {
            self.place = None;
            return Ok(None);
        }
        Ok(Some((kvs(ops.next()), read_at)))
    }

    /// Finds what to watch: the blocker just older than this contender, or for a semaphore
    /// the whole range (any older holder's release may be the one that lets it in).
    async fn find_ahead(&mut self, revision: i64) -> Result<()> {
        let Some((blockers, options)) = self.keys.ahead_read(revision) else {
            self.wait_for = Some(Watched::Range(self.keys.range().as_bytes().to_vec()));
            return Ok(());
        };
        let what = "finding the contender ahead in the lock's queue";
        let answer = self.inner.get(what, &blockers, Some(options)).await?;
        self.wait_for = answer
            .kvs()
            .first()
            .map(|kv| Watched::Key(kv.key().to_vec()));
        Ok(())
    }
}

/// What a waiter watches for deletions.
#[derive(Clone, PartialEq, Eq)]
enum Watched {
    Key(Vec<u8>),
    Range(Vec<u8>),
}

fn kvs(op: Option<TxnOpResponse>) -> Vec<KeyValue> {
    match op {
        Some(TxnOpResponse::Get(mut get)) => get.take_kvs(),
        _ => Vec::new(),
    }
}

#[async_trait]
impl Waiter for EtcdWaiter {
    async fn poll(&mut self) -> Result<Attempt> {
        self.wait_for = None;
        if self.place.as_ref().is_some_and(|p| p.session.is_over()) {
            // The session ended while this contender waited: its key goes with the lease.
            self.place = None;
        }
        self.inner
            .holdings
            .refuse_mixed_read_write(&self.req, NAME)?;
        let placed = self.place.as_ref().is_some_and(|p| p.revision.is_some());
        let read = if placed {
            self.read_queue().await?
        } else {
            match self.take_place().await {
                Ok(read) => Some(read),
                // etcd ended the lease before our clock said so (an election that outlasted
                // the keep-alives, a revoke): that session is over; queue on a new one.
                Err(e) if crate::error::chain(&e).contains("lease not found") => {
                    if let Some(place) = self.place.take() {
                        self.inner.sessions.discard(&place.session).await;
                    }
                    Some(self.take_place().await?)
                }
                Err(e) => return Err(e),
            }
        };
        let (Some((oldest, _)), Some(place)) = (read, self.place.as_ref()) else {
            // Our key vanished (deleted by hand, or the lease ended in etcd first): queue again.
            self.place = None;
            return Ok(Attempt::Held {
                retry_after: Some(Duration::ZERO),
            });
        };
        let revision = place.revision.expect("placed");
        if self.keys.holds(&oldest, revision) {
            // Our key was in that read, so our lease was alive at its revision; our own clock
            // must agree that it still is (etcd issue 11456: a lock granted on an expired lease).
            if place.session.is_over() {
                self.place = None;
                return Ok(Attempt::Held {
                    retry_after: Some(Duration::ZERO),
                });
            }
            // Its key deleted by someone else (a forced release) ends it too.
            let ended = place.session.holding_ended(place.key.clone(), revision);
            let valid_until = place.session.valid_until();
            let place = self.place.take().expect("placed");
            self.inner.holdings.hold(
                revision,
                Holding {
                    name: self.req.name.clone(),
                    kind: self.req.kind,
                    owner: self.req.owner.clone(),
                    key: place.key,
                    session: place.session,
                },
            );
            return Ok(Attempt::Acquired {
                token: FencingToken(revision as u64),
                hold: Hold::Session {
                    ended,
                    valid_until: Some(valid_until),
                },
            });
        }
        self.find_ahead(revision).await?;
        // No one ahead any more (it left between the reads): ask again at once.
        let retry_after = self.wait_for.is_none().then_some(Duration::ZERO);
        Ok(Attempt::Held { retry_after })
    }

    async fn changed(&mut self) -> Result<()> {
        let Some(watched) = self.wait_for.clone() else {
            return Ok(());
        };
        if self
            .watching
            .as_ref()
            .is_none_or(|(current, _)| *current != watched)
        {
            // Watched from now on, not from the revision of the last read: etcd serves a watch
            // that starts in the past from a catch-up loop that runs every 100 ms, which would
            // delay most hand-offs. A deletion between that read and the watch is caught by
            // polling once more as soon as the watch exists.
            self.watching = None;
            let mut options = WatchOptions::new().with_filters([WatchFilterType::NoPut]);
            let key = match &watched {
                Watched::Key(key) => key.clone(),
                Watched::Range(prefix) => {
                    options = options.with_prefix();
                    prefix.clone()
                }
            };
            let what = "watching the contender ahead";
            let mut stream = self.inner.watch(what, &key, options).await?;
            // The "created" answer: from here on no deletion is missed.
            let created = stream
                .message()
                .await
                .map_err(from_etcd("watching the contender ahead"))?;
            if created.is_some_and(|c| c.created() && !c.canceled()) {
                self.watching = Some((watched, stream));
            }
            return Ok(());
        }
        let (_, stream) = self.watching.as_mut().expect("watching");
        loop {
            match stream.message().await {
                Ok(Some(answer))
                    if !answer.canceled()
                        && answer.compact_revision() == 0
                        && answer.events().is_empty() =>
                {
                    // A progress notice.
                    continue;
                }
                // The deletion, or a watch that ended: either way, poll again.
                _ => {
                    self.watching = None;
                    return Ok(());
                }
            }
        }
    }

    async fn leave(&mut self) -> Result<()> {
        self.watching = None;
        self.wait_for = None;
        let Some(place) = self.place.take() else {
            return Ok(());
        };
        // Without a revision, a put whose answer never came may have landed: the key goes if it
        // holds our token.
        let owner = self.req.owner.clone();
        self.inner
            .delete_surely(place.key, place.revision, owner, place.session)
            .await?;
        Ok(())
    }
}
