//! The object-store backend: leases on S3 (and S3-compatibles) and Azure Blob Storage, through
//! the `object_store` crate, with no lock server. Its guarantees are below.
//!
//! * `config`: the `s3://` and `az://` URLs and the client they build.
//! * `record`: what a lock's or a latch's object holds, and where it lives.
//! * `objects`: reads and conditional writes of records, their errors, and the connect probe.
//! * `watch`: how long this client has seen each holding unchanged, by its monotonic clock
//!   (the store has no clock that ends a lease: waiters judge it).
//!
//! The store cannot notify: one poller per lock a client waits for (`backends/poll_watch.rs`)
//! reads its object for all of the client's waiters there, and wakes one when it is free; one
//! per latch wakes its waiters when it reaches 0.
//!
#![doc = include_str!("docs.md")]

mod config;
mod objects;
mod record;
mod watch;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use async_trait::async_trait;
use object_store::ObjectStore;
use object_store::path::Path;

use crate::backend::{Attempt, Backend, Capabilities, Inspection, Latches, LockRequest, Wakeups};
use crate::backends::poll_watch::{self, Pace, PollWatch, Wake};
use crate::error::Result;
use crate::options::Options;
use crate::status::{ForcedRelease, Holder, Holding, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName};
use crate::url::redact;

use config::{ObjectStoreUrl, Timeouts};
use objects::{Objects, Read, Written as Put};
use record::{Held, Layout, LockRecord};
use watch::Watch;

const NAME: &str = "objectstore";

/// A holding's record as this client last wrote it, the version the store answered, and when
/// the write was sent: the holder judges its own lease by that, as the core does.
#[derive(Clone)]
struct Written {
    record: LockRecord,
    version: object_store::UpdateVersion,
    sent: Instant,
}

// Defaults of `Options`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
const RETRY_FOR: Duration = Duration::from_secs(5);

/// Leases are kept in whole seconds: a lease shorter than a second would leave a renewal at a
/// third of it no room for an object store's round trip (tens of ms, seconds at worst).
const GRANULARITY: Duration = Duration::from_secs(1);

/// The difference in clock rate tolerated between a holder and a waiter, in thousandths of a
/// lease: a waiter takes a holding over only after seeing it unchanged for its lease and this
/// much more. 1 % is 10,000 ppm: fifty times what NTP lets a clock slew (500 ppm), a hundred
/// times a free-running quartz clock's error.
const DRIFT_PER_MILLE: u32 = 10;

/// How often a client's poller reads a lock its waiters wait for: 50 ms after the object
/// changed, slowing to every 200 ms while it stays the same, and never sooner than four round
/// trips of its last read. A waiting client costs one read per 200 ms and lock, whatever its
/// number of waiters, and sees a release within 200 ms. Faster polling costs the holders: on
/// a contended lock the object changes at every hand-over, and every client's poller then
/// reads at its fastest (3 processes × 8 tasks × 60 takes on Azurite: 32 s reading 10 ms after
/// a change, 24–25 s at this pace).
const WATCH_PACE: Pace = Pace {
    fastest: Duration::from_millis(50),
    slowest: Duration::from_millis(200),
    round_trips: 4,
};

/// How long after its release a take trusts the version this client wrote there: a hand-over
/// to one of its own waiters follows within milliseconds; a guess older than this is more
/// likely stale (another client took it since), and costs a failed write and a read.
const FREED_FRESH: Duration = Duration::from_secs(1);

/// How many recent releases are remembered at most (a client may lock millions of names).
const FREED_KEPT: usize = 1024;

/// How often a step that lost a race to another writer is tried again before answering.
const RACE_RETRIES: usize = 4;

/// Locks in an object store: one object per lock name, written only by conditional writes.
/// Built by [`crate::connect`] from `s3://` and `az://`, or by [`ObjectStoreBackend::from_store`]
/// on a client of the application's own.
pub struct ObjectStoreBackend {
    objects: Arc<Objects>,
    layout: Layout,
    watch: Arc<Watch>,
    /// One poller per lock this client's waiters wait for: whether its object is free.
    pollers: PollWatch<bool>,
    /// One poller per latch this client waits on: its count.
    latch_pollers: PollWatch<u64>,
    /// The version this client last wrote for each of its holdings: a renewal or release
    /// writes on it without reading first (one request instead of two).
    written: Mutex<std::collections::HashMap<Path, Written>>,
    /// The free record this client wrote at each of its recent releases, and its version: a
    /// take soon after by one of its waiters (a hand-over, the usual step of a contended lock)
    /// writes on it without reading first.
    freed: Mutex<std::collections::HashMap<Path, Written>>,
    /// This client's takes that found their lock held, by object and owner: its waiters. Only
    /// they take a release the short way; a new take (the releasing task's next, in a loop)
    /// reads first, so it does not jump ahead of those who waited.
    waiting: Mutex<std::collections::HashSet<(Path, String)>>,
    /// The objects one of this client's waiters is taking right after its release, since when.
    handing_over: Mutex<std::collections::HashMap<Path, Instant>>,
    shown_url: String,
}

impl std::fmt::Debug for ObjectStoreBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStoreBackend")
            .field("url", &self.shown_url)
            .finish()
    }
}

impl ObjectStoreBackend {
    /// Connects to the bucket or container `url` names and checks that the store keeps the
    /// guarantees a lock needs (see "Connect" in the docs above).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &Options::default()).await
    }

    /// [`connect`](Self::connect) with [`Options`] (each unset field keeps the default:
    /// connect 5 s, response 10 s, retries within 5 s).
    pub async fn connect_with(url: &str, options: &Options) -> Result<Self> {
        let parsed = ObjectStoreUrl::parse(url)?;
        let timeouts = Timeouts {
            connect: options.connect_timeout.unwrap_or(CONNECT_TIMEOUT),
            response: options.response_timeout.unwrap_or(RESPONSE_TIMEOUT),
            retry_for: options.retry_for.unwrap_or(RETRY_FOR),
        };
        let (store, hint) = parsed.build(timeouts)?;
        Self::open(store, &parsed.prefix, redact(url), hint).await
    }

    /// Locks in `store`, a client the application built (any `object_store` store with
    /// conditional writes: S3, Azure, GCS, in-memory), under `prefix`. The same probe as
    /// [`connect`](Self::connect) runs first; its timeouts and retries are the client's own.
    pub async fn from_store(store: Arc<dyn ObjectStore>, prefix: &str) -> Result<Self> {
        let shown = format!("{store}/{prefix}");
        Self::open(store, prefix, shown, None).await
    }

    /// `hint`: what to do if the probe's first request fails, from [`ObjectStoreUrl::build`].
    async fn open(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        shown: String,
        hint: Option<&str>,
    ) -> Result<Self> {
        let layout = Layout::new(prefix);
        let objects = Objects::new(store, shown.clone());
        objects.probe(&layout, hint).await?;
        Ok(ObjectStoreBackend {
            objects: Arc::new(objects),
            layout,
            watch: Arc::default(),
            // Any waiter's take would do, and only one can succeed.
            pollers: PollWatch::new(WATCH_PACE, Wake::One),
            // A latch at 0 lets every waiter go.
            latch_pollers: PollWatch::new(WATCH_PACE, Wake::Each),
            written: Mutex::default(),
            freed: Mutex::default(),
            waiting: Mutex::default(),
            handing_over: Mutex::default(),
            shown_url: shown,
        })
    }

    /// The `object_store` client the locks are written through (e.g. for a test to look at an
    /// object, or to remove a lock object no one will take again).
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        self.objects.store()
    }

    /// The key of lock `name`'s object: `PREFIX/locks/` and the name, `_XX` for each byte other
    /// than a letter, a digit and `-` (cut, with its SHA-256, past 180 characters).
    pub fn lock_object(&self, name: &LockName) -> Path {
        self.layout.lock(name.as_str())
    }

    /// The record this owner would write to hold `name` with `token`.
    fn mine(req: &LockRequest, token: u64, renewals: u64, since_unix_ms: i64) -> LockRecord {
        LockRecord {
            name: req.name.as_str().to_string(),
            token,
            held: Some(Held {
                owner: req.owner.as_str().to_string(),
                lease_ms: req.lease.duration().as_millis() as u64,
                renewals,
                since_unix_ms,
                // One line of the record: a program name with a line break in it stays one.
                holder: Holder::this_process_record().replace(['\n', '\r'], " "),
            }),
        }
    }

    fn remember(&self, path: &Path, written: Written) {
        lock(&self.written).insert(path.clone(), written);
    }

    fn forget(&self, path: &Path) {
        lock(&self.written).remove(path);
    }

    /// This client wrote `path` free: a take soon after may write on that version.
    fn note_freed(&self, path: &Path, written: Written) {
        let mut freed = lock(&self.freed);
        if freed.len() >= FREED_KEPT {
            freed.retain(|_, w| w.sent.elapsed() < FREED_FRESH);
            if freed.len() >= FREED_KEPT {
                freed.clear();
            }
        }
        freed.insert(path.clone(), written);
    }

    /// The free record this client wrote at `path` less than [`FREED_FRESH`] ago, for a take
    /// by one of its waiters, taken out (one take tries it; a conflict means it is stale).
    fn just_freed(&self, path: &Path, owner: &str) -> Option<Written> {
        if !lock(&self.waiting).contains(&(path.clone(), owner.to_string())) {
            return None;
        }
        lock(&self.freed)
            .remove(path)
            .filter(|w| w.sent.elapsed() < FREED_FRESH)
    }

    /// Whether `owner`'s take at `path` is waiting (found the lock held) or not any more.
    fn note_waiting(&self, path: &Path, owner: &str, waiting: bool) {
        let key = (path.clone(), owner.to_string());
        let mut set = lock(&self.waiting);
        if !waiting {
            set.remove(&key);
            return;
        }
        // Waiters that gave up leave their entry: the set is emptied past a bound.
        if set.len() >= FREED_KEPT {
            set.clear();
        }
        set.insert(key);
    }

    /// A take the client can answer without asking the store: the lock is held by another
    /// task of this client, by what it last wrote there and its lease left (only its renewal
    /// or release changes that object, a takeover only after the lease), or is being handed
    /// over to one of its waiters. Under contention a client's own tasks then send no read
    /// to an object it is writing: on RustFS a read beside a write on the same object
    /// delays that write (a lock per object), and contended hand-overs ran at a third of
    /// the rate.
    fn held_here(&self, path: &Path, owner: &str) -> Option<Attempt> {
        if let Some(w) = lock(&self.written).get(path) {
            let held = w.record.held.as_ref()?;
            let left = Duration::from_millis(held.lease_ms).saturating_sub(w.sent.elapsed());
            return (held.owner != owner && !left.is_zero()).then_some(Attempt::Held {
                retry_after: Some(left),
            });
        }
        let mut handing_over = lock(&self.handing_over);
        match handing_over.get(path) {
            Some(since) if since.elapsed() < FREED_FRESH => {
                Some(Attempt::Held { retry_after: None })
            }
            Some(_) => {
                handing_over.remove(path);
                None
            }
            None => None,
        }
    }

    /// A take right after this client's own release: a write on the version it wrote then,
    /// without reading first. `None`: someone wrote since (or it was too long ago), so the
    /// take reads.
    async fn take_after_own_release(
        &self,
        req: &LockRequest,
        path: &Path,
    ) -> Result<Option<Attempt>> {
        let Some(freed) = self.just_freed(path, req.owner.as_str()) else {
            return Ok(None);
        };
        let next = Self::mine(req, freed.record.token + 1, 0, unix_ms());
        let sent = Instant::now();
        lock(&self.handing_over).insert(path.clone(), sent);
        let written = self
            .objects
            .write(path, Some(&freed.version), &next.encode())
            .await;
        // Dropped before this (a cancelled take), the mark lapses after FREED_FRESH.
        lock(&self.handing_over).remove(path);
        Ok(self.took(req, path, next, written?, sent))
    }

    /// What a take's write answered: `Some` holding if it landed (its record is this
    /// client's to renew and release), `None` if another writer came first.
    fn took(
        &self,
        req: &LockRequest,
        path: &Path,
        record: LockRecord,
        put: Put,
        sent: Instant,
    ) -> Option<Attempt> {
        let Put::Yes(version) = put else {
            return None;
        };
        self.watch.forget(path);
        let token = FencingToken(record.token);
        self.remember(
            path,
            Written {
                record,
                version,
                sent,
            },
        );
        Some(Attempt::leased(token, req))
    }

    /// What this client last wrote at `path`, if it held there as `owner`.
    fn last_written(&self, path: &Path, owner: &str) -> Option<Written> {
        let written = lock(&self.written);
        let last = written.get(path)?;
        let held = last.record.held.as_ref()?;
        (held.owner == owner).then(|| last.clone())
    }

    /// How long the holding at `path`, read at `version` with an answer that arrived at
    /// `received`, has left before it lapses, and whether this client's own clock judges it:
    /// a holding this client wrote lapses its lease after the write was sent (as the core
    /// judges it); any other only once this client has seen it unchanged for the lease and
    /// the drift allowance.
    fn left(
        &self,
        path: &Path,
        version: &object_store::UpdateVersion,
        received: Instant,
        lease: Duration,
    ) -> Duration {
        let own = lock(&self.written)
            .get(path)
            .filter(|w| w.version == *version)
            .map(|w| w.sent);
        match own {
            Some(sent) => lease.saturating_sub(received.saturating_duration_since(sent)),
            None => takeover_after(lease).saturating_sub(self.watch.seen(path, version, received)),
        }
    }

    /// Writes `next` over the version `read` saw (or creates it where there was none).
    async fn write_over(&self, path: &Path, read: &Read, next: &LockRecord) -> Result<Put> {
        self.objects
            .write(path, read.version.as_ref(), &next.encode())
            .await
    }

    /// One attempt of `try_take`, on the record as read now.
    async fn take_once(&self, req: &LockRequest, path: &Path) -> Result<Option<Attempt>> {
        let read = self.objects.read(path).await?;
        let current = read.lock_record(path)?;
        let now_ms = unix_ms();
        let next = match &current {
            // Never taken, or the object was lost: a counter no lower than the clock in µs,
            // above every token drawn before (each take costs far more than a µs).
            None => Self::mine(req, clock_micros().max(1), 0, now_ms),
            Some(rec) => match &rec.held {
                None => Self::mine(req, rec.token + 1, 0, now_ms),
                Some(h) => {
                    let version = read.version.as_ref().expect("a record has a version");
                    let lease = Duration::from_millis(h.lease_ms);
                    let left = self.left(path, version, read.received, lease);
                    if h.owner == req.owner.as_str() && !left.is_zero() {
                        // Its own holding, live: the lease restarts, the token stays.
                        Self::mine(req, rec.token, h.renewals + 1, h.since_unix_ms)
                    } else if !left.is_zero() {
                        return Ok(Some(Attempt::Held {
                            retry_after: Some(left),
                        }));
                    } else {
                        // Its holder stopped renewing: taken over, only if still unchanged.
                        Self::mine(req, rec.token + 1, 0, now_ms)
                    }
                }
            },
        };
        let sent = Instant::now();
        let put = self.write_over(path, &read, &next).await?;
        // `None`: another writer came first, and the caller reads again.
        Ok(self.took(req, path, next, put, sent))
    }

    /// Renews or frees the holding `token` names by a write on the version this client last
    /// wrote, else on the version read now. `free`: write the lock free instead of renewing.
    async fn rewrite_own(
        &self,
        req: &LockRequest,
        token: Option<FencingToken>,
        free: bool,
    ) -> Result<bool> {
        let path = self.layout.lock(req.name.as_str());
        let owner = req.owner.as_str();
        let mut known = self.last_written(&path, owner);
        for _ in 0..RACE_RETRIES {
            let (record, version, left) = match known.take() {
                Some(w) => {
                    let lease =
                        Duration::from_millis(w.record.held.as_ref().map_or(0, |h| h.lease_ms));
                    let left = lease.saturating_sub(w.sent.elapsed());
                    (w.record, w.version, left)
                }
                None => {
                    let read = self.objects.read(&path).await?;
                    match (read.lock_record(&path)?, read.version) {
                        (Some(record), Some(version)) => {
                            let lease = record.held.as_ref().map_or(0, |h| h.lease_ms);
                            let left = self.left(
                                &path,
                                &version,
                                read.received,
                                Duration::from_millis(lease),
                            );
                            (record, version, left)
                        }
                        _ => {
                            self.forget(&path);
                            return Ok(false);
                        }
                    }
                }
            };
            let Some(held) = record.held.as_ref().filter(|h| h.owner == owner) else {
                self.forget(&path);
                return Ok(false);
            };
            // A holding whose lease ran out is not there, as on every store: not renewed
            // back to life, not released (nothing changes).
            if left.is_zero() || token.is_some_and(|t| t.get() != record.token) {
                return Ok(false);
            }
            let next = if free {
                LockRecord {
                    held: None,
                    ..record.clone()
                }
            } else {
                Self::mine(req, record.token, held.renewals + 1, held.since_unix_ms)
            };
            let sent = Instant::now();
            match self
                .objects
                .write(&path, Some(&version), &next.encode())
                .await?
            {
                Put::Yes(version) => {
                    let written = Written {
                        record: next,
                        version,
                        sent,
                    };
                    if free {
                        self.forget(&path);
                        self.note_freed(&path, written);
                    } else {
                        self.remember(&path, written);
                    }
                    return Ok(true);
                }
                // Changed since: by this owner (a re-entry's take) or by a taker after the
                // lease ended. Read what it is now.
                Put::Conflict => self.forget(&path),
            }
        }
        Err(self.objects.contended("renewing or releasing the lock"))
    }

    /// The status of one lock object, `None` when it is free, or when this client has seen
    /// its holding unchanged for longer than its lease and the drift allowance.
    async fn status_at(&self, path: &Path) -> Result<Option<LockStatus>> {
        let read = self.objects.read(path).await?;
        let Some(record) = read.lock_record(path)? else {
            return Ok(None);
        };
        let mut status = LockStatus::new(record.name.clone(), LockKind::Mutex);
        status.last_token = Some(FencingToken(record.token));
        if let (Some(h), Some(version)) = (&record.held, &read.version) {
            let lease = Duration::from_millis(h.lease_ms);
            let left = self.left(path, version, read.received, lease);
            if !left.is_zero() {
                status.holdings.push(
                    Holding::new(FencingToken(record.token))
                        .holder_record(Some(&h.holder))
                        .since_unix_ms(Some(h.since_unix_ms))
                        .lease_left_ms(left.min(lease).as_millis() as i64),
                );
            }
        }
        Ok(Some(status))
    }
}

/// A holder's lease and the drift allowance: how long a waiter must see its record unchanged.
fn takeover_after(lease: Duration) -> Duration {
    lease + lease * DRIFT_PER_MILLE / 1000
}

/// A number that differs with the object's version (0: no object).
fn fingerprint(version: Option<&object_store::UpdateVersion>) -> u64 {
    use std::hash::{Hash, Hasher};
    let Some(version) = version else { return 0 };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (&version.e_tag, &version.version).hash(&mut hasher);
    hasher.finish().max(1)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn clock_micros() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[async_trait]
impl Backend for ObjectStoreBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leases()
            .notifying()
            .granularity(GRANULARITY)
            .judged_by_waiters(DRIFT_PER_MILLE)
            .refusing_with(
                "(waiters judge each holding by its object's ETag; a lock of many holders or a \
                 queue on one object cannot be judged holder by holder)",
            )
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        let path = self.layout.lock(req.name.as_str());
        if let Some(held) = self.held_here(&path, req.owner.as_str()) {
            self.note_waiting(&path, req.owner.as_str(), true);
            return Ok(held);
        }
        let mut attempt = self.take_after_own_release(req, &path).await?;
        for _ in 0..RACE_RETRIES {
            if attempt.is_some() {
                break;
            }
            attempt = self.take_once(req, &path).await?;
        }
        // Lost every race: someone else is writing it right now.
        let attempt = attempt.unwrap_or(Attempt::Held { retry_after: None });
        let waiting = matches!(attempt, Attempt::Held { .. });
        self.note_waiting(&path, req.owner.as_str(), waiting);
        Ok(attempt)
    }

    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<Option<Duration>> {
        let renewed = self.rewrite_own(req, Some(token), false).await?;
        Ok(renewed.then(|| req.lease.duration()))
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        self.rewrite_own(req, token, true).await
    }

    async fn watch_free(&self, req: &LockRequest) -> Result<Wakeups> {
        let path = self.layout.lock(req.name.as_str());
        let (objects, watch) = (self.objects.clone(), self.watch.clone());
        let key = path.to_string();
        let read: poll_watch::Read<bool> = Arc::new(move || {
            let (objects, watch, path) = (objects.clone(), watch.clone(), path.clone());
            Box::pin(async move {
                let read = objects.read(&path).await?;
                let record = read.lock_record(&path)?;
                let free = match (record.and_then(|r| r.held), &read.version) {
                    // Each sighting counts towards judging the holding (`watch.rs`), and a
                    // holding seen unchanged for its lease and the allowance is free.
                    (Some(held), Some(version)) => {
                        let lease = Duration::from_millis(held.lease_ms);
                        watch.seen(&path, version, read.received) >= takeover_after(lease)
                    }
                    _ => true,
                };
                Ok((fingerprint(read.version.as_ref()), free))
            })
        });
        Ok(self.pollers.subscribe(key, read, Box::new(|free| *free)))
    }

    crate::backend::offers!(latches, inspection);
}

#[async_trait]
impl Latches for ObjectStoreBackend {
    async fn latch_set(&self, name: &LockName, count: u64) -> Result<bool> {
        let path = self.layout.latch(name.as_str());
        for _ in 0..RACE_RETRIES {
            let read = self.objects.read(&path).await?;
            if read.latch_count(&path)?.is_some_and(|c| c > 0) {
                return Ok(false);
            }
            let bytes = record::encode_latch(count);
            if let Put::Yes(_) = self
                .objects
                .write(&path, read.version.as_ref(), &bytes)
                .await?
            {
                return Ok(true);
            }
        }
        Err(self.objects.contended("setting the latch"))
    }

    async fn latch_count_down(&self, name: &LockName) -> Result<u64> {
        let path = self.layout.latch(name.as_str());
        // Counting down is the one step many clients race on: tried until it lands, with a
        // jittered pause between attempts.
        let mut pause = Duration::from_millis(5);
        loop {
            let read = self.objects.read(&path).await?;
            let count = match (read.latch_count(&path)?, read.version.as_ref()) {
                (Some(count), Some(version)) if count > 0 => (count, version),
                // Never created by a count-down, never below 0.
                _ => return Ok(0),
            };
            let bytes = record::encode_latch(count.0 - 1);
            if let Put::Yes(_) = self.objects.write(&path, Some(count.1), &bytes).await? {
                return Ok(count.0 - 1);
            }
            tokio::time::sleep(objects::jitter(pause)).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    async fn latch_count(&self, name: &LockName) -> Result<u64> {
        let path = self.layout.latch(name.as_str());
        let read = self.objects.read(&path).await?;
        Ok(read.latch_count(&path)?.unwrap_or(0))
    }

    async fn watch_latch(&self, name: &LockName) -> Result<Wakeups> {
        let path = self.layout.latch(name.as_str());
        let objects = self.objects.clone();
        let key = path.to_string();
        let read: poll_watch::Read<u64> = Arc::new(move || {
            let (objects, path) = (objects.clone(), path.clone());
            Box::pin(async move {
                let read = objects.read(&path).await?;
                let count = read.latch_count(&path)?.unwrap_or(0);
                Ok((fingerprint(read.version.as_ref()), count))
            })
        });
        Ok(self
            .latch_pollers
            .subscribe(key, read, Box::new(|count| *count == 0)))
    }
}

#[async_trait]
impl Inspection for ObjectStoreBackend {
    async fn status(&self, which: &Selection) -> Result<Vec<LockStatus>> {
        let mut all = Vec::new();
        match which {
            Selection::Name(name) => {
                all.extend(self.status_at(&self.layout.lock(name.as_str())).await?);
            }
            Selection::Prefix(prefix) => {
                let (folder, key_prefix) = self.layout.locks_listing(prefix);
                for path in self.objects.list(&folder, &key_prefix).await? {
                    if let Some(status) = self.status_at(&path).await? {
                        // A cut name's key may start alike: the record has the name.
                        if status.name.starts_with(prefix.as_str()) {
                            all.push(status);
                        }
                    }
                }
                all.sort_by(|a, b| a.name.cmp(&b.name));
            }
        }
        Ok(all)
    }

    async fn force_release(&self, name: &LockName, _kind: LockKind) -> Result<ForcedRelease> {
        let path = self.layout.lock(name.as_str());
        for _ in 0..RACE_RETRIES {
            let read = self.objects.read(&path).await?;
            let current = read.lock_record(&path)?;
            let (removed, fence) = match &current {
                None => (Vec::new(), clock_micros().max(1)),
                Some(rec) => {
                    let removed = rec
                        .held
                        .iter()
                        .map(|h| {
                            Holding::new(FencingToken(rec.token))
                                .holder_record(Some(&h.holder))
                                .since_unix_ms(Some(h.since_unix_ms))
                        })
                        .collect();
                    (removed, rec.token + 1)
                }
            };
            let next = LockRecord {
                name: name.as_str().to_string(),
                token: fence,
                held: None,
            };
            if let Put::Yes(_) = self.write_over(&path, &read, &next).await? {
                self.forget(&path);
                return Ok(ForcedRelease::new(removed, FencingToken(fence)));
            }
        }
        Err(self.objects.contended("forcing a release"))
    }
}

/// The requests each step costs, counted on the way to `object_store`'s in-memory store (which
/// has both conditional writes, so the connect probe passes): the figures docs.md states. The
/// behaviour itself is tested against RustFS and Azurite (tests/objectstore_*.rs).
#[cfg(test)]
mod requests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures_util::stream::BoxStream;
    use object_store::memory::InMemory;
    use object_store::path::Path;
    use object_store::{
        CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
        PutMultipartOptions, PutOptions, PutPayload, PutResult,
    };

    use super::*;
    use crate::types::{Lease, OwnerToken};

    /// The same lock asked by another owner (another task).
    fn another_owner(req: &LockRequest) -> LockRequest {
        LockRequest::new(
            req.name.clone(),
            LockKind::Mutex,
            OwnerToken::random(),
            req.lease,
        )
    }
    #[derive(Debug, Default)]
    struct Counted {
        inner: InMemory,
        gets: AtomicUsize,
        puts: AtomicUsize,
    }

    impl std::fmt::Display for Counted {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("counted in-memory store")
        }
    }

    #[async_trait]
    impl ObjectStore for Counted {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            opts: PutOptions,
        ) -> object_store::Result<PutResult> {
            self.puts.fetch_add(1, Ordering::SeqCst);
            self.inner.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &Path,
            options: GetOptions,
        ) -> object_store::Result<GetResult> {
            self.gets.fetch_add(1, Ordering::SeqCst);
            self.inner.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: BoxStream<'static, object_store::Result<Path>>,
        ) -> BoxStream<'static, object_store::Result<Path>> {
            self.inner.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    impl Counted {
        /// (reads, writes) since the last call.
        fn take(&self) -> (usize, usize) {
            (
                self.gets.swap(0, Ordering::SeqCst),
                self.puts.swap(0, Ordering::SeqCst),
            )
        }
    }

    #[tokio::test]
    async fn each_step_costs_what_the_docs_say() {
        let store = Arc::new(Counted::default());
        let backend = ObjectStoreBackend::from_store(store.clone(), "app")
            .await
            .unwrap();
        assert_eq!(
            store.take(),
            (0, 4),
            "the probe: four writes (and a delete)"
        );
        let req = LockRequest::new(
            LockName::new("job").unwrap(),
            LockKind::Mutex,
            OwnerToken::random(),
            Lease::new(Duration::from_secs(30)).unwrap(),
        );
        let Attempt::Acquired { token, .. } = backend.try_take(&req).await.unwrap() else {
            panic!("a free lock was not taken");
        };
        assert_eq!(
            store.take(),
            (1, 1),
            "a take: a read and a conditional write"
        );
        assert!(backend.extend(&req, token).await.unwrap().is_some());
        assert_eq!(store.take(), (0, 1), "a renewal: one conditional write");
        let other = another_owner(&req);
        assert!(matches!(
            backend.try_take(&other).await.unwrap(),
            Attempt::Held {
                retry_after: Some(_)
            }
        ));
        assert_eq!(
            store.take(),
            (0, 0),
            "a look by another task of the holding client: answered without a request"
        );
        let elsewhere = ObjectStoreBackend::from_store(store.clone(), "app")
            .await
            .unwrap();
        store.take();
        assert!(matches!(
            elsewhere.try_take(&other).await.unwrap(),
            Attempt::Held {
                retry_after: Some(_)
            }
        ));
        assert_eq!(store.take(), (1, 0), "another client's look: one read");
        assert!(backend.release(&req, Some(token)).await.unwrap());
        assert_eq!(store.take(), (0, 1), "a release: one conditional write");
        let Attempt::Acquired { token: next, .. } = backend.try_take(&other).await.unwrap() else {
            panic!("a released lock was not taken");
        };
        assert_eq!(
            store.take(),
            (0, 1),
            "a waiter's take right after this client's release: one conditional write, no read"
        );
        assert_eq!(
            next.get(),
            token.get() + 1,
            "the next take raises the counter by one"
        );
        // A take that did not wait (the releasing task's next, say) reads first: it does not
        // jump ahead of this client's waiters.
        assert!(backend.release(&other, Some(next)).await.unwrap());
        let fresh = another_owner(&req);
        store.take();
        let Attempt::Acquired { token: mine, .. } = backend.try_take(&fresh).await.unwrap() else {
            panic!("a released lock was not taken");
        };
        assert_eq!(store.take(), (1, 1), "a take that did not wait reads first");
        // Another client wrote since this one's release: the waiter's write on what it knew
        // fails, and its take reads and writes as usual.
        assert!(backend.release(&fresh, Some(mine)).await.unwrap());
        let third = another_owner(&req);
        let Attempt::Acquired { token: theirs, .. } = elsewhere.try_take(&third).await.unwrap()
        else {
            panic!("another client did not take the released lock");
        };
        assert!(matches!(
            backend.try_take(&req).await.unwrap(),
            Attempt::Held { .. }
        ));
        assert!(elsewhere.release(&third, Some(theirs)).await.unwrap());
        store.take();
        let Attempt::Acquired { token: last, .. } = backend.try_take(&req).await.unwrap() else {
            panic!("the lock freed by another client was not taken");
        };
        assert_eq!(
            store.take(),
            (2, 2),
            "a stale guess: a failed write and its check, then a read and a write"
        );
        assert_eq!(last.get(), theirs.get() + 1, "tokens keep rising");
    }

    /// Waiters of one client share its poller: eight waiters cost that client about one read
    /// per poll, not one each, and the release of the holder (another client) lets one in.
    #[tokio::test(start_paused = true)]
    async fn a_waiting_client_reads_once_per_poll_whatever_its_number_of_waiters() {
        let store = Arc::new(Counted::default());
        let holder = crate::Client::new(
            ObjectStoreBackend::from_store(store.clone(), "app")
                .await
                .unwrap(),
        );
        let waiting = crate::Client::new(
            ObjectStoreBackend::from_store(store.clone(), "app")
                .await
                .unwrap(),
        );
        let held = holder.lock("job").acquire().await.unwrap();
        store.take();
        let mut waiters: Vec<_> = (0..8)
            .map(|_| {
                let lock = waiting.lock("job");
                tokio::spawn(async move { lock.acquire().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (reads, writes) = store.take();
        // Each waiter looks twice (16: once, then again right after subscribing, so a release
        // in between is not missed), then the poller alone: at once, 50, 150 and 350 ms,
        // then every 200 ms (12 in 2 s: 28 in all). Each waiter polling on its own would read
        // some 80 times a second: over 1,000 reads.
        assert!(
            (16..=16 + 14).contains(&reads),
            "{reads} reads in 2 s of waiting"
        );
        assert_eq!(writes, 0, "a waiter writes nothing while the lock is held");
        held.release().await.unwrap();
        let (first, at, rest) = tokio::time::timeout(
            Duration::from_millis(500),
            futures_util::future::select_all(waiters.iter_mut()),
        )
        .await
        .expect("the release let no waiter in within 500 ms");
        assert!(first.unwrap().is_ok(), "waiter {at} failed");
        drop(rest);
        for waiter in &waiters {
            waiter.abort();
        }
    }
}
