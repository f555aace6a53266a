//! The strategies: how one instance of the service protects an order (read stock, check, write
//! stock − 1; then insert the order, which needs no protection) or a "+1" (read, add, write) — or
//! fails to.
//!
//! A distributed-lock strategy is just a distlock URL: `lock` runs once per `--lock-url`, so
//! every backend the library gains is in the demo without new code here.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use futures_util::FutureExt;

use distlock_axum::LockGuard;

use super::store::{Product, Store};

/// What the load generator asks the instances to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Scenario {
    /// N products with one unit each, N buyers each ordering the next item in stock.
    Stock,
    /// One counter at 0, N "+1" requests.
    Counter,
    /// The counter, with one instance stopped (SIGSTOP) while it holds the lock, longer than
    /// the lease, then resumed: its write lands late unless the store fences it.
    Pause,
}

impl Scenario {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::Stock => "stock",
            Scenario::Counter => "counter",
            Scenario::Pause => "pause",
        }
    }

    /// The HTTP path of one request, before its `/{key}`.
    pub(crate) fn path(self) -> &'static str {
        match self {
            Scenario::Stock => "/order",
            Scenario::Counter | Scenario::Pause => "/increment",
        }
    }

    /// The lock of key K is named `{prefix}-K`.
    pub(crate) fn lock_prefix(self) -> &'static str {
        match self {
            Scenario::Stock => "demo-stock",
            Scenario::Counter | Scenario::Pause => "demo-counter",
        }
    }
}

/// How an instance protects its read-check-write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Method {
    /// Nothing: the read-check-write races.
    None,
    /// A mutex inside each instance: excludes requests of one process only.
    LocalMutex,
    /// A version column, compare-and-swap on write, retry on conflict.
    Optimistic,
    /// A distlock lock around the whole read-check-write.
    Lock,
    /// The lock, and the write checked against the lock's fencing token by the store, in the
    /// write's transaction (`distlock::fence::SqlFence`): a late holder's write is refused.
    #[value(name = "lock+fence")]
    LockFence,
    /// One atomic statement in the store: check and decrement (or add) at once, lock-free.
    Atomic,
    /// The hot stock (or the counter) split into segments, one distlock lock each.
    Segmented,
    /// A transaction whose read locks the row (`SELECT … FOR UPDATE`) until the commit that
    /// makes the write visible: the sources' pessimistic fix. PostgreSQL and MySQL stores only.
    RowLock,
}

impl Method {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Method::None => "none",
            Method::LocalMutex => "local-mutex",
            Method::Optimistic => "optimistic",
            Method::Lock => "lock",
            Method::LockFence => "lock+fence",
            Method::Atomic => "atomic",
            Method::Segmented => "segmented",
            Method::RowLock => "row-lock",
        }
    }

    /// Whether this method takes distlock locks (and so needs a lock URL).
    pub(crate) fn uses_locks(self) -> bool {
        matches!(self, Method::Lock | Method::LockFence | Method::Segmented)
    }

    /// Whether the service locks each request by its key before the handler runs (the
    /// `distlock_axum` layer); segmented takes its locks in the handler, one segment at a time.
    pub(crate) fn locks_the_request(self) -> bool {
        matches!(self, Method::Lock | Method::LockFence)
    }
}

/// One strategy as run and reported: a method, and for lock methods the lock store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Strategy {
    pub(crate) method: Method,
    pub(crate) lock: Option<LockStore>,
}

/// A store the lock strategies take their locks in: a distlock URL and the short name the
/// table shows for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LockStore {
    pub(crate) url: String,
    /// The URL's scheme (`sqlite`, `redis`, …), numbered (`sqlite#2`) when several URLs share
    /// it, so that a URL's host or password never reaches the table.
    pub(crate) name: String,
}

impl LockStore {
    /// Names `urls` by scheme, numbering the schemes that repeat.
    pub(crate) fn named(urls: &[String]) -> Vec<LockStore> {
        let schemes: Vec<String> = urls.iter().map(|u| lock_scheme(u)).collect();
        schemes
            .iter()
            .enumerate()
            .map(|(i, scheme)| {
                let same = schemes.iter().filter(|s| *s == scheme).count();
                let nth = schemes[..=i].iter().filter(|s| *s == scheme).count();
                let name = if same > 1 {
                    format!("{scheme}#{nth}")
                } else {
                    scheme.clone()
                };
                LockStore {
                    url: urls[i].clone(),
                    name,
                }
            })
            .collect()
    }
}

impl Strategy {
    /// `none`, `optimistic`, `lock:sqlite`, `segmented:redis`, …
    pub(crate) fn label(&self) -> String {
        match &self.lock {
            Some(lock) => format!("{}:{}", self.method.name(), lock.name),
            None => self.method.name().to_string(),
        }
    }

    /// Whether the strategy must be correct in `scenario` with `instances` instances; the
    /// others are in the demo to show the race (a plain lock cannot stop a paused holder).
    pub(crate) fn must_be_correct(&self, scenario: Scenario, instances: u32) -> bool {
        match self.method {
            Method::None => false,
            Method::Lock => scenario != Scenario::Pause,
            Method::LocalMutex => instances == 1,
            _ => true,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// The scheme of a lock URL, lower-cased: `sqlite`, `redis`, `postgres`, …
fn lock_scheme(url: &str) -> String {
    url.split(':').next().unwrap_or("").to_ascii_lowercase()
}

/// What a request came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Sold (the product id) or counted.
    Done(i64),
    /// Nothing left to sell.
    SoldOut,
    /// The optimistic strategy lost the compare-and-swap this many times in a row.
    GaveUp(u32),
    /// The store refused the write: a newer lock holder had written (`StaleToken`).
    Refused,
    /// The request named a key this run does not have (it has this many).
    NoSuchKey(u32),
}

/// The settings every instance of one run shares.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub(crate) scenario: Scenario,
    pub(crate) method: Method,
    /// This instance's number, recorded in each order.
    pub(crate) instance: u32,
    /// Products on sale (the stock scenario); their ids are 1 ..= products.
    pub(crate) products: u32,
    /// Keys the requests are spread over, each its own lock: groups of products (stock), or
    /// counters (counter). Request n names key n mod keys in its path.
    pub(crate) keys: u32,
    /// Segments of the segmented strategy.
    pub(crate) segments: u32,
    /// Time between reading and writing back, as a database round trip or business logic
    /// would take; widens the race window.
    pub(crate) pause: Duration,
    /// Compare-and-swap attempts of the optimistic strategy before it gives up.
    pub(crate) retries: u32,
    /// How long a request waits for a distlock lock before it fails.
    pub(crate) lock_wait: Duration,
    /// The lease of each distlock lock (renewed while held).
    pub(crate) lease: Duration,
    /// The pause scenario: how long instance 1 stops itself (SIGSTOP) while it holds the lock,
    /// once, on its first request. Zero: never.
    pub(crate) stop_for: Duration,
}

/// One instance's protection: the strategy's state, shared by all its requests.
pub(crate) struct Protection {
    settings: Settings,
    store: Store,
    local: tokio::sync::Mutex<()>,
    locks: Option<distlock::Client>,
    /// Segments this instance found sold out (stock never comes back, so this stays true).
    empty_segments: Vec<AtomicBool>,
    /// Whether this instance has had its stop (the pause scenario).
    stopped: AtomicBool,
}

impl Protection {
    /// `locks` must be given for lock methods.
    pub(crate) fn new(settings: Settings, store: Store, locks: Option<distlock::Client>) -> Self {
        let empty_segments = (0..settings.segments.max(1))
            .map(|_| AtomicBool::new(false))
            .collect();
        Protection {
            settings,
            store,
            local: tokio::sync::Mutex::new(()),
            locks,
            empty_segments,
            stopped: AtomicBool::new(false),
        }
    }

    /// Serves request number `n` of the run, for `key`. `guard` is the request's lock, taken
    /// by the service's layer for the lock strategies.
    pub(crate) async fn serve(
        &self,
        n: u64,
        key: u32,
        guard: Option<LockGuard>,
    ) -> Result<Outcome> {
        let keys = self.settings.keys.max(1);
        if key >= keys {
            return Ok(Outcome::NoSuchKey(keys));
        }
        match self.settings.scenario {
            Scenario::Stock => self.order(n, key, guard).await,
            Scenario::Counter | Scenario::Pause => self.increment(n, key, guard).await,
        }
    }

    /// A buyer orders the first item in stock among the key's products.
    async fn order(&self, buyer: u64, key: u32, guard: Option<LockGuard>) -> Result<Outcome> {
        let everything = segment_ids(self.settings.products, self.settings.keys, key);
        match self.settings.method {
            Method::None => {
                let taken = self.take_unit(&everything).await?;
                self.record(taken, buyer).await
            }
            Method::LocalMutex => {
                let taken = {
                    let _only_this_process = self.local.lock().await;
                    self.take_unit(&everything).await?
                };
                self.record(taken, buyer).await
            }
            Method::LockFence => Err(anyhow!("lock+fence runs in the pause scenario only")),
            Method::Lock => {
                // The layer holds the key's lock; the order's insert needs none, so let it go
                // first (else the layer releases it with the response).
                let guard = layer_guard(guard)?;
                let taken = self.take_unit(&everything).await;
                release_early(guard).await?;
                self.record(taken?, buyer).await
            }
            Method::Optimistic => {
                for _ in 0..self.settings.retries {
                    let Some(read) = self.store.first_in_stock(&everything).await? else {
                        return Ok(Outcome::SoldOut);
                    };
                    self.pause().await;
                    if self.store.cas_stock(&read, read.stock - 1).await? {
                        return self.record(Some(read.id), buyer).await;
                    }
                }
                Ok(Outcome::GaveUp(self.settings.retries))
            }
            Method::Atomic => {
                let taken = self.store.take_atomic(&everything).await?;
                self.record(taken, buyer).await
            }
            Method::Segmented => self.order_segmented(buyer).await,
            Method::RowLock => self.sell_row_locked(&everything, buyer).await,
        }
    }

    /// Buyers start at segment `buyer mod S`, so S of them sell at once, each under its
    /// segment's lock; a buyer whose segment is sold out moves on to the next.
    async fn order_segmented(&self, buyer: u64) -> Result<Outcome> {
        let segments = self.settings.segments.max(1);
        let first = (buyer % u64::from(segments)) as u32;
        for step in 0..segments {
            let segment = (first + step) % segments;
            if self.empty_segments[segment as usize].load(Ordering::Relaxed) {
                continue;
            }
            let guard = self
                .acquire(&format!("demo-stock-segment-{segment}"))
                .await?;
            let taken = self
                .take_unit(&segment_ids(self.settings.products, segments, segment))
                .await;
            release(guard).await?;
            match taken? {
                None => self.empty_segments[segment as usize].store(true, Ordering::Relaxed),
                taken => return self.record(taken, buyer).await,
            }
        }
        Ok(Outcome::SoldOut)
    }

    /// The part of the sources' order flow that needs one writer at a time, unprotected by
    /// itself: read the first item in stock, check, write stock − 1 computed in memory. The unit
    /// taken, or `None` when sold out; the caller then records the order.
    async fn take_unit(&self, ids: &Range<i64>) -> Result<Option<i64>> {
        let Some(Product { id, stock, .. }) = self.store.first_in_stock(ids).await? else {
            return Ok(None);
        };
        if stock < 1 {
            return Ok(None);
        }
        self.pause().await;
        self.store.write_stock(id, stock - 1).await?;
        Ok(Some(id))
    }

    /// The same read, check and write as [`take_unit`](Self::take_unit), and the order's insert,
    /// in one transaction whose read locks the product's row: the next buyer's read waits for
    /// this commit and then sees the stock it wrote.
    async fn sell_row_locked(&self, ids: &Range<i64>, buyer: u64) -> Result<Outcome> {
        let mut tx = self.store.begin().await?;
        let Some(Product { id, stock, .. }) = tx.lock_first_in_stock(ids).await? else {
            tx.commit().await?;
            return Ok(Outcome::SoldOut);
        };
        self.pause().await;
        tx.write_stock(id, stock - 1).await?;
        tx.insert_order(id, buyer, self.settings.instance).await?;
        tx.commit().await?;
        Ok(Outcome::Done(id))
    }

    /// Records the order for the unit `taken` (after the critical section: the order row is the
    /// buyer's own, and only the stock needs one writer at a time), or answers sold out.
    async fn record(&self, taken: Option<i64>, buyer: u64) -> Result<Outcome> {
        let Some(product) = taken else {
            return Ok(Outcome::SoldOut);
        };
        self.store
            .insert_order(product, buyer, self.settings.instance)
            .await?;
        Ok(Outcome::Done(product))
    }

    /// A "+1" to the key's counter.
    async fn increment(&self, n: u64, key: u32, guard: Option<LockGuard>) -> Result<Outcome> {
        let slot = key;
        match self.settings.method {
            Method::None => self.add_one(slot).await,
            Method::LocalMutex => {
                let _only_this_process = self.local.lock().await;
                self.add_one(slot).await
            }
            // The same code as `None`: the layer around the handler holds the key's lock, and
            // releases it when the response is produced.
            Method::Lock => self.add_one(slot).await,
            Method::LockFence => {
                let guard = layer_guard(guard)?;
                let read = self.store.read_counter(slot).await?;
                self.pause().await;
                self.stop_once();
                let written = self
                    .store
                    .write_counter_fenced(slot, read.value + 1, guard.name(), guard.fencing_token())
                    .await;
                match written {
                    Ok(()) => Ok(Outcome::Done(read.value + 1)),
                    Err(e) if is_stale(&e) => Ok(Outcome::Refused),
                    Err(e) => Err(e),
                }
            }
            Method::Optimistic => {
                for _ in 0..self.settings.retries {
                    let read = self.store.read_counter(slot).await?;
                    self.pause().await;
                    if self.store.cas_counter(slot, &read, read.value + 1).await? {
                        return Ok(Outcome::Done(read.value + 1));
                    }
                }
                Ok(Outcome::GaveUp(self.settings.retries))
            }
            Method::Atomic => {
                self.store.add_atomic(slot).await?;
                Ok(Outcome::Done(0))
            }
            Method::Segmented => {
                let slot = (n % u64::from(self.settings.segments.max(1))) as u32;
                let guard = self
                    .acquire(&format!("demo-counter-segment-{slot}"))
                    .await?;
                let added = self.add_one(slot).await;
                release(guard).await?;
                added
            }
            Method::RowLock => {
                let mut tx = self.store.begin().await?;
                let read = tx.lock_counter(slot).await?;
                self.pause().await;
                tx.write_counter(slot, read.value + 1).await?;
                tx.commit().await?;
                Ok(Outcome::Done(read.value + 1))
            }
        }
    }

    /// Read, add one in memory, write back: loses updates unless something serializes it.
    async fn add_one(&self, slot: u32) -> Result<Outcome> {
        let read = self.store.read_counter(slot).await?;
        self.pause().await;
        self.stop_once();
        self.store.write_counter(slot, read.value + 1).await?;
        Ok(Outcome::Done(read.value + 1))
    }

    /// The pause scenario's stall: instance 1, on its first request, stops its whole process
    /// (every thread, the lock's watchdog included) between its read and its write, as a GC
    /// pause or a frozen VM would. A helper process it starts first sends SIGCONT after
    /// `stop_for`, by which time the lease has run out and other instances have written.
    fn stop_once(&self) {
        if self.settings.stop_for.is_zero()
            || self.settings.instance != 1
            || self.stopped.swap(true, Ordering::SeqCst)
        {
            return;
        }
        let pid = std::process::id();
        let resume = format!(
            "sleep {:.3}; kill -CONT {pid}",
            self.settings.stop_for.as_secs_f64()
        );
        if std::process::Command::new("sh")
            .args(["-c", &resume])
            .spawn()
            .is_ok()
        {
            // SAFETY: raise(3) takes an integer and signals only this process; SIGSTOP stops
            // it until the helper started just above sends SIGCONT.
            unsafe { libc::raise(libc::SIGSTOP) };
        }
    }

    async fn pause(&self) {
        if !self.settings.pause.is_zero() {
            tokio::time::sleep(self.settings.pause).await;
        }
    }

    async fn acquire(&self, name: &str) -> Result<distlock::Guard> {
        let client = self.locks.as_ref().ok_or_else(|| {
            anyhow!(
                "the {} strategy needs a lock URL",
                self.settings.method.name()
            )
        })?;
        // On a session store the lease is at least the session's expiry, and SQL session locks
        // take none (their holding is the connection's): what the store keeps, not a refusal.
        crate::cmd::keepable(client, client.lock(name), self.settings.lease)
            .acquire_timeout(self.settings.lock_wait)
            .await
            .with_context(|| format!("acquiring lock {name:?}"))
    }
}

/// Whether the store refused a fenced write for a stale token.
fn is_stale(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<distlock::Error>())
        .any(distlock::Error::is_stale_token)
}

/// Product ids of `segment`: ids 1 ..= products split into `segments` contiguous ranges whose
/// sizes differ by one at most.
fn segment_ids(products: u32, segments: u32, segment: u32) -> Range<i64> {
    let products = i64::from(products);
    let segments = i64::from(segments.max(1));
    let start = 1 + products * i64::from(segment) / segments;
    let end = 1 + products * (i64::from(segment) + 1) / segments;
    start..end
}

/// The lock the service's layer took for this request.
fn layer_guard(guard: Option<LockGuard>) -> Result<LockGuard> {
    guard.ok_or_else(|| anyhow!("the lock strategies run behind the service's lock layer"))
}

/// Releases `guard`, failing loudly if the lease had been lost meanwhile: someone else may have
/// run the same critical section at the same time, and the audit will show it.
async fn release(guard: distlock::Guard) -> Result<()> {
    let name = guard.name().to_string();
    // Asked only of a guard already lost: the reason's future subscribes to the holding's
    // state, which no request should pay.
    let known = guard
        .is_lost()
        .then(|| guard.lost().now_or_never())
        .flatten();
    released(&name, known, guard.release()).await
}

/// [`release`] for the layer's guard, before the response.
async fn release_early(guard: LockGuard) -> Result<()> {
    let name = guard.name().to_string();
    let known = guard
        .is_lost()
        .then(|| guard.lost().now_or_never())
        .flatten();
    released(&name, known, guard.release()).await
}

/// The outcome of `release`, with why the lock was lost if the client already knew (its
/// clock, a renewal, the session's end: `known` is then ready); otherwise only the release
/// itself found the holding gone from the store.
async fn released(
    name: &str,
    known: Option<distlock::Error>,
    release: impl Future<Output = distlock::Result<bool>>,
) -> Result<()> {
    let still_ours = release
        .await
        .with_context(|| format!("releasing lock {name:?}"))?;
    if still_ours {
        return Ok(());
    }
    let why = known.map_or_else(
        || "the store no longer had it at the release".to_string(),
        |e| e.to_string(),
    );
    Err(anyhow!(
        "lock {name:?} was lost before the request finished: {why}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_the_lock_store_by_scheme_only() {
        let urls = [
            "redis://:secret@10.0.0.1:6379".to_string(),
            "sqlite:/tmp/a.db".to_string(),
            "sqlite:/tmp/b.db".to_string(),
        ];
        let stores = LockStore::named(&urls);
        let labels: Vec<String> = stores
            .into_iter()
            .map(|lock| {
                Strategy {
                    method: Method::Lock,
                    lock: Some(lock),
                }
                .label()
            })
            .collect();
        assert_eq!(labels, ["lock:redis", "lock:sqlite#1", "lock:sqlite#2"]);
        let s = Strategy {
            method: Method::None,
            lock: None,
        };
        assert_eq!(s.label(), "none");
    }

    #[test]
    fn segments_cover_every_product_once() {
        for (products, segments) in [(5000, 8), (10, 3), (2, 8), (7, 1)] {
            let mut next = 1;
            for segment in 0..segments {
                let ids = segment_ids(products, segments, segment);
                assert_eq!(ids.start, next, "{products} products, {segments} segments");
                next = ids.end;
            }
            assert_eq!(next, i64::from(products) + 1);
        }
    }

    #[test]
    fn only_none_and_multi_instance_local_mutex_may_be_wrong() {
        let of = |method| Strategy { method, lock: None };
        let stock = Scenario::Stock;
        assert!(!of(Method::None).must_be_correct(stock, 1));
        assert!(of(Method::LocalMutex).must_be_correct(stock, 1));
        assert!(!of(Method::LocalMutex).must_be_correct(stock, 3));
        assert!(of(Method::Optimistic).must_be_correct(stock, 3));
        assert!(of(Method::Atomic).must_be_correct(stock, 3));
        assert!(of(Method::Lock).must_be_correct(stock, 3));
        assert!(!of(Method::Lock).must_be_correct(Scenario::Pause, 3));
        assert!(of(Method::LockFence).must_be_correct(Scenario::Pause, 3));
    }
}
