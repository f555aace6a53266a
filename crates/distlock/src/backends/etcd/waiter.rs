//! A contender's place in a lock's queue: its key. The first poll puts it (in one transaction
//! with reading the oldest contender, as etcd's `concurrency.Mutex` does); later polls only read.
//! A contender that is not the oldest watches the one key just older than its own for deletion,
//! and polls once more when the watch exists, so no release is missed and one release wakes one
//! waiter. A semaphore's waiter can be let in by any older contender leaving: it watches the
//! whole range, keeps that watch across polls, and counts the older contenders' deletions down
//! from the number its last read found, so a release wakes only the waiters it lets in.
//!
//! A holding's key deleted by someone else (a forced release) ends it as its session's end does:
//! the session's keep-alive reads its holdings' keys (see [`session`](super::session)).

use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
    WatchFilterType, WatchOptions, WatchStream,
};

use std::time::Duration;

use super::session::Session;
use super::{Holding, Inner, NAME, from_etcd};
use crate::backend::{Attempt, Hold, LockRequest, Waiter, permits_differ};
use crate::backends::etcd::keys::{self, LockKeys};
use crate::backends::queues::records::{contender_of, encode_contender};
use crate::error::{Error, ErrorKind, Result};
use crate::types::{FencingToken, LockKind};

/// How many times a semaphore's contender reads its size again after it changed in between.
const RACES: u32 = 10;

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
    /// The key ahead of this contender as the last queue read found it, read in the same
    /// transaction (`Some(None)`: none older): no request of its own to find what to watch.
    /// `None` when that read did not ask (a semaphore, or a put whose answer was lost).
    ahead: Option<Option<Vec<u8>>>,
    watching: Option<(Watched, WatchStream)>,
    /// A semaphore's contender goes by the size kept, whatever it is: once its key was put
    /// under the size it asked (or when its request says so, see
    /// [`LockRequest::follows_resize`]).
    follows: bool,
    /// The size a semaphore's contender expects its size key to keep (`None`: no key yet): the
    /// size it asked until a read shows another.
    kept: Option<u32>,
    /// A semaphore's waiter: how many contenders were older than it at the last read, and that
    /// read's revision. Its watch counts their deletions after that revision down, so only the
    /// waiter a release lets in reads again: 24 waiters on one semaphore read after every
    /// release, each, and took 5 minutes for 2,400 hand-overs on a loaded machine.
    older: Option<(i64, i64)>,
}

impl EtcdWaiter {
    pub(super) fn new(inner: Arc<Inner>, req: LockRequest) -> Self {
        let keys = LockKeys::new(&inner.config.prefix, &req.name, req.kind);
        EtcdWaiter {
            inner,
            follows: req.follows_resize,
            kept: Some(keys.permits()),
            req,
            keys,
            place: None,
            wait_for: None,
            ahead: None,
            watching: None,
            older: None,
        }
    }

    /// Puts this contender's key (or finds it, if an earlier put's answer was lost), in one
    /// transaction with reading the oldest contender. Answers that read and its revision;
    /// `None` (placed, nothing read) when a semaphore's read would not be by the size kept.
    ///
    /// A semaphore's key is put in one transaction with comparing its size key to the size
    /// this contender expects (or, at first use, with putting it): the key is never put under
    /// another size. A size other than the one asked puts nothing and is refused, unless this
    /// contender goes by the size kept ([`LockRequest::follows_resize`], or a contender placed
    /// before, queueing again).
    async fn take_place(&mut self) -> Result<Option<(Vec<KeyValue>, i64)>> {
        let place = match self.place.take() {
            Some(p) if !p.session.is_over() => p,
            _ => {
                let session = self.inner.session_for(&self.req).await?;
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
        let size_key = self.keys.size_key().map(str::to_string);
        for _ in 0..RACES {
            let (blockers, options) = self.keys.holder_read();
            let mut when = vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)];
            let mut then = Vec::new();
            let mut otherwise = vec![TxnOp::get(key.clone(), None)];
            if let Some(size_key) = &size_key {
                when.push(size_is(size_key, self.kept));
                if self.kept.is_none() {
                    // The semaphore's first take: its size is this caller's.
                    then.push(TxnOp::put(size_key.clone(), permits.to_string(), None));
                }
                otherwise.push(TxnOp::get(size_key.clone(), None));
            }
            then.push(TxnOp::put(key.clone(), value.clone(), Some(put.clone())));
            then.push(TxnOp::get(blockers.clone(), Some(options.clone())));
            // Where to wait, should the key not hold: in the same transaction, not a range
            // request after it (a contended hand-off sent two).
            let ahead = self.keys.ahead_of_new_read();
            if let Some((blockers, options)) = &ahead {
                then.push(TxnOp::get(blockers.clone(), Some(options.clone())));
            }
            otherwise.push(TxnOp::get(blockers, Some(options)));
            let txn = Txn::new().when(when).and_then(then).or_else(otherwise);
            let answer = self
                .inner
                .txn_alone("taking a place in the lock's queue", txn)
                .await?;
            let read_at = answer.header().map_or(0, |h| h.revision());
            let succeeded = answer.succeeded();
            let mut ops = answer.op_responses().into_iter();
            if succeeded {
                if self.kept.is_none() && size_key.is_some() {
                    ops.next(); // the size's put
                    self.kept = Some(permits);
                }
                ops.next(); // the key's put
                let oldest = kvs(ops.next());
                if ahead.is_some() {
                    self.ahead = Some(keys::ahead_in(&kvs(ops.next()), read_at));
                }
                return Ok(Some(self.placed(read_at, oldest, read_at)));
            }
            let mine = kvs(ops.next()).into_iter().next();
            let kept = match &size_key {
                Some(_) => Some(size_of(kvs(ops.next()).first())?),
                None => None,
            };
            match mine {
                // The key is this waiter's alone: it is there because an earlier put landed.
                Some(kv) if contender_of(kv.value(), owner) => {
                    let read = kvs(ops.next());
                    let Some(kept) = kept else {
                        return Ok(Some(self.placed(kv.create_revision(), read, read_at)));
                    };
                    // Read under the size expected: good only if that is the size kept.
                    let same = kept == self.kept;
                    self.follow(kept);
                    let placed = self.placed(kv.create_revision(), read, read_at);
                    return Ok(same.then_some(placed));
                }
                // Another owner's token, or (a lock without a size) no key where the compare
                // said there was one.
                Some(_) => return Err(not_ours(&key)),
                None if size_key.is_none() => return Err(not_ours(&key)),
                None => {}
            }
            // Not put: the semaphore's size is not the one expected.
            let kept = kept.flatten();
            if let Some(size) = kept
                && size != permits
                && !self.follows
            {
                self.place = None;
                return Err(permits_differ(NAME, &self.req.name, size, permits));
            }
            self.kept = kept;
            if let Some(size) = kept {
                self.keys.with_permits(size);
            }
        }
        Err(Error::new(
            ErrorKind::Backend,
            format!(
                "semaphore {:?}: its size changed under {RACES} takes in a row",
                self.req.name
            ),
        )
        .with_backend(NAME))
    }

    /// This contender's key is in the queue, created at `revision`: from now on a semaphore's
    /// contender goes by the size kept. Answers `read`, the oldest contenders at `read_at`.
    fn placed(&mut self, revision: i64, read: Vec<KeyValue>, read_at: i64) -> (Vec<KeyValue>, i64) {
        if let Some(place) = self.place.as_mut() {
            place.revision = Some(revision);
        }
        self.follows = true;
        (read, read_at)
    }

    /// Goes by `kept`, the size a read found kept (`None`: no size key; the rule stays).
    fn follow(&mut self, kept: Option<u32>) {
        self.kept = kept;
        if let Some(size) = kept {
            self.keys.with_permits(size);
        }
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
        let size_key = self.keys.size_key().map(str::to_string);
        for _ in 0..RACES {
            let (blockers, options) = self.keys.holder_read();
            let mut reads = vec![
                TxnOp::get(key.clone(), None),
                TxnOp::get(blockers.clone(), Some(options)),
            ];
            if size_key.is_some() {
                // The contenders older than this one: how many, the watch then counts down.
                // (Their keys, not a count: etcd counts a range before the create-revision
                // filter, so a count-only read would count the younger ones too.)
                let older = GetOptions::new()
                    .with_prefix()
                    .with_max_create_revision(revision - 1)
                    .with_keys_only();
                reads.push(TxnOp::get(blockers, Some(older)));
            } else if let Some((blockers, options)) = self.keys.ahead_read(revision) {
                // Where to wait, should the key not hold, in the same read.
                reads.push(TxnOp::get(blockers, Some(options)));
            }
            // A semaphore's oldest keys are read by the size kept: under a compare that it is
            // the size expected, else the size is read instead, and the read is made again.
            let txn = match &size_key {
                Some(size_key) => Txn::new()
                    .when([size_is(size_key, self.kept)])
                    .and_then(reads)
                    .or_else([
                        TxnOp::get(key.clone(), None),
                        TxnOp::get(size_key.clone(), None),
                    ]),
                None => Txn::new().and_then(reads),
            };
            let answer = self.inner.txn("reading the lock's queue", txn).await?;
            let read_at = answer.header().map_or(0, |h| h.revision());
            let succeeded = answer.succeeded();
            let mut ops = answer.op_responses().into_iter();
            let mine = kvs(ops.next());
            if !mine.iter().any(|kv| kv.create_revision() == revision) {
                self.place = None;
                return Ok(None);
            }
            if succeeded {
                let read = kvs(ops.next());
                if size_key.is_some() {
                    self.older = match ops.next() {
                        Some(TxnOpResponse::Get(get)) => Some((get.kvs().len() as i64, read_at)),
                        _ => None,
                    };
                } else {
                    self.ahead = Some(keys::ahead_in(&kvs(ops.next()), revision));
                }
                return Ok(Some((read, read_at)));
            }
            // Resized (or, deleted by hand, no size any more: the rule stays as last seen).
            self.follow(size_of(kvs(ops.next()).first())?);
        }
        Err(Error::new(
            ErrorKind::Backend,
            format!(
                "semaphore {:?}: its size changed under {RACES} reads in a row",
                self.req.name
            ),
        )
        .with_backend(NAME))
    }

    /// Finds what to watch: the blocker just older than this contender, or for a semaphore
    /// the whole range (any older holder's release may be the one that lets it in) and its
    /// size key (a growth may), which is a prefix of the range.
    async fn find_ahead(&mut self, revision: i64) -> Result<()> {
        let Some((blockers, options)) = self.keys.ahead_read(revision) else {
            let prefix = self.keys.size_key().unwrap_or(self.keys.range());
            self.wait_for = Some(Watched::Range(prefix.as_bytes().to_vec()));
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

/// The compare that holds when the semaphore's size key keeps `kept` (`None`: no size key).
fn size_is(size_key: &str, kept: Option<u32>) -> Compare {
    match kept {
        Some(size) => Compare::value(size_key, CompareOp::Equal, size.to_string()),
        None => Compare::version(size_key, CompareOp::Equal, 0),
    }
}

/// The size a semaphore's size key keeps (`None`: no key).
pub(super) fn size_of(kv: Option<&KeyValue>) -> Result<Option<u32>> {
    let Some(kv) = kv else {
        return Ok(None);
    };
    std::str::from_utf8(kv.value())
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|size: &u32| *size > 0)
        .map(Some)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Backend,
                "a semaphore whose stored size is not a positive number",
            )
            .with_backend(NAME)
        })
}

fn not_ours(key: &str) -> Error {
    Error::new(
        ErrorKind::Backend,
        format!("the contender key {key:?} holds another owner's token"),
    )
    .with_backend(NAME)
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
        self.ahead = None;
        if self.place.as_ref().is_some_and(|p| p.session.is_over()) {
            // The session ended while this contender waited: its key goes with the lease.
            self.place = None;
        }
        self.inner
            .holdings
            .refuse_mixed_read_write(&self.req, NAME)?;
        let placed = self.place.as_ref().is_some_and(|p| p.revision.is_some());
        if !placed {
            self.older = None;
        }
        let read = if placed {
            self.read_queue().await?
        } else {
            let taken = match self.take_place().await {
                Ok(read) => read,
                // etcd ended the lease before our clock said so (an election that outlasted
                // the keep-alives, a revoke): that session is over; queue on a new one.
                Err(e) if crate::error::chain(&e).contains("lease not found") => {
                    if let Some(place) = self.place.take() {
                        self.inner.sessions.discard(&place.session).await;
                    }
                    self.take_place().await?
                }
                Err(e) => return Err(e),
            };
            match taken {
                Some(read) => Some(read),
                None => self.read_queue().await?,
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
        match self.ahead.take() {
            Some(ahead) => self.wait_for = ahead.map(Watched::Key),
            None => self.find_ahead(revision).await?,
        }
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
            let (key, options) = match &watched {
                Watched::Key(key) => (
                    key.clone(),
                    WatchOptions::new().with_filters([WatchFilterType::NoPut]),
                ),
                // A semaphore's range and size key: puts too, for a put of the size (a
                // resize); puts of newcomers' keys are passed over below, and deletions are
                // told apart by the deleted key's create revision.
                Watched::Range(prefix) => (
                    prefix.clone(),
                    WatchOptions::new().with_prefix().with_prev_key(),
                ),
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
        let size_key = self.keys.size_key().map(str::as_bytes);
        let mine = self.place.as_ref().and_then(|p| p.revision);
        let permits = i64::from(self.kept.unwrap_or(1));
        let (watched, stream) = self.watching.as_mut().expect("watching");
        let range = matches!(watched, Watched::Range(_));
        loop {
            let answer = match stream.message().await {
                Ok(Some(answer)) if !answer.canceled() && answer.compact_revision() == 0 => answer,
                // A watch that ended: poll again, and watch anew.
                _ => {
                    self.watching = None;
                    return Ok(());
                }
            };
            if !range {
                if answer.events().is_empty() {
                    continue; // a progress notice
                }
                // The deletion of the key ahead: poll again (a new key ahead, a new watch).
                self.watching = None;
                return Ok(());
            }
            // A semaphore: the watch stays open across polls (no event is missed between
            // them); it wakes the waiter on a resize, and once enough older contenders left.
            let mut wake = false;
            for event in answer.events() {
                let Some(kv) = event.kv() else { continue };
                if event.event_type() == EventType::Put {
                    // A newcomer's key changes nothing for this waiter; a resize may.
                    wake |= Some(kv.key()) == size_key;
                    continue;
                }
                let created = event.prev_kv().map(KeyValue::create_revision);
                if created.zip(mine).is_some_and(|(c, m)| c > m) {
                    continue; // a younger contender left
                }
                match (&mut self.older, created.is_some()) {
                    // Counted down only for deletions the last read did not see.
                    (Some((older, read_at)), true) => {
                        if kv.mod_revision() > *read_at {
                            *older -= 1;
                        }
                        wake |= *older < permits;
                    }
                    _ => wake = true,
                }
            }
            if wake {
                return Ok(());
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
