//! Unit tests of the core, on the [`Engine`] itself, with paused Tokio time and a fake in-memory
//! [`Backend`] (a stand-in for the *trait*, not for any store: every store is tested for real by
//! the testkit suite).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{Attempt, Backend, Capabilities, Hold, LockRequest};
use crate::core::Engine;
use crate::core::lease::{HeldLease, Terms};
use crate::core::wait::{self, Deadline};
use crate::error::{Error, ErrorKind, Result};
use crate::types::{FencingToken, Lease, LockKind, LockName, OwnerToken};

/// Locks in a map (name → owner, token), with switches to make renewal fail or hang and takes
/// slow.
#[derive(Debug, Default)]
struct FakeBackend {
    held: Mutex<HashMap<String, (String, u64)>>,
    next_token: AtomicU32,
    extends: AtomicU32,
    takes: AtomicU32,
    releases: AtomicU32,
    take_delay_ms: AtomicU32,
    extend_fails: AtomicBool,
    extend_hangs: AtomicBool,
    forget_owner: AtomicBool,
    /// [`LockRequest::follows_resize`] of each take, in order.
    follows: Mutex<Vec<bool>>,
    /// When set, grants are sessions that end by time, confirmed until what this says.
    session_until: Mutex<Option<tokio::sync::watch::Receiver<tokio::time::Instant>>>,
    /// What it says it can do, when not a lease store's.
    caps: Mutex<Option<Capabilities>>,
    /// Its [`Backend::max_batch`] (0: the default, 1).
    max_batch: AtomicU32,
    /// Calls of [`Backend::extend_many`].
    batches: AtomicU32,
}

#[async_trait]
impl Backend for FakeBackend {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn capabilities(&self) -> Capabilities {
        self.caps
            .lock()
            .unwrap()
            .unwrap_or_else(Capabilities::leases)
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        self.takes.fetch_add(1, Ordering::SeqCst);
        self.follows.lock().unwrap().push(req.follows_resize);
        let delay = self.take_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay.into())).await;
        }
        let mut held = self.held.lock().unwrap();
        match held.get(req.name.as_str()) {
            Some((owner, token)) if owner == req.owner.as_str() => {
                Ok(Attempt::leased(FencingToken(*token), req))
            }
            Some(_) => Ok(Attempt::Held {
                retry_after: Some(req.lease.duration()),
            }),
            None => {
                let token = u64::from(self.next_token.fetch_add(1, Ordering::SeqCst) + 1);
                held.insert(
                    req.name.to_string(),
                    (req.owner.as_str().to_string(), token),
                );
                if let Some(until) = self.session_until.lock().unwrap().clone() {
                    return Ok(Attempt::Acquired {
                        token: FencingToken(token),
                        hold: Hold::Session {
                            ended: Box::pin(std::future::pending()),
                            valid_until: Some(until),
                        },
                    });
                }
                Ok(Attempt::leased(FencingToken(token), req))
            }
        }
    }

    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<Option<Duration>> {
        self.extends.fetch_add(1, Ordering::SeqCst);
        if self.extend_hangs.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if self.extend_fails.load(Ordering::SeqCst) {
            return Err(Error::new(ErrorKind::Connection, "store unreachable"));
        }
        if self.forget_owner.load(Ordering::SeqCst) {
            return Ok(None);
        }
        let held = self.held.lock().unwrap();
        let ours = held
            .get(req.name.as_str())
            .is_some_and(|(o, t)| o == req.owner.as_str() && *t == token.get());
        Ok(ours.then(|| req.lease.duration()))
    }

    fn max_batch(&self) -> usize {
        self.max_batch.load(Ordering::SeqCst).max(1) as usize
    }

    async fn extend_many(
        &self,
        batch: &[(LockRequest, FencingToken)],
    ) -> Vec<Result<Option<Duration>>> {
        assert!(
            batch.len() <= self.max_batch(),
            "a batch of {}",
            batch.len()
        );
        self.batches.fetch_add(1, Ordering::SeqCst);
        futures_util::future::join_all(batch.iter().map(|(req, token)| self.extend(req, *token)))
            .await
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        let mut held = self.held.lock().unwrap();
        let ours = held.get(req.name.as_str()).is_some_and(|(o, t)| {
            o == req.owner.as_str() && token.is_none_or(|token| *t == token.get())
        });
        if ours {
            held.remove(req.name.as_str());
        }
        Ok(ours)
    }
}

impl FakeBackend {
    fn is_held(&self, name: &str) -> bool {
        self.held.lock().unwrap().contains_key(name)
    }
}

fn engine() -> (Arc<Engine>, Arc<FakeBackend>) {
    engine_with(|_| {})
}

/// An engine over a fake backend set up by `setup` first.
fn engine_with(setup: impl FnOnce(&FakeBackend)) -> (Arc<Engine>, Arc<FakeBackend>) {
    let backend = FakeBackend::default();
    setup(&backend);
    let backend = Arc::new(backend);
    (
        Arc::new(Engine::new(backend.clone(), super::DEFAULT_EXIT_WAIT, None)),
        backend,
    )
}

fn request(name: &str, owner: &OwnerToken, lease: Duration) -> LockRequest {
    LockRequest::new(
        LockName::new(name).unwrap(),
        LockKind::Mutex,
        owner.clone(),
        Lease::new(lease).unwrap(),
    )
}

fn fresh(name: &str, lease: Duration) -> LockRequest {
    request(name, &OwnerToken::random(), lease)
}

const LEASE: Duration = Duration::from_secs(3);

/// A lease set by the caller, renewed by the watchdog.
const RENEWED: Terms = Terms {
    renew: true,
    lease_set: true,
    max_hold: None,
};
/// A lease set by the caller, without the watchdog.
const UNRENEWED: Terms = Terms {
    renew: false,
    lease_set: true,
    max_hold: None,
};

async fn take(engine: &Arc<Engine>, req: LockRequest) -> Arc<HeldLease> {
    wait::acquire(engine, req, RENEWED, Deadline::Never)
        .await
        .unwrap()
        .expect("a wait without deadline ends by acquiring")
}

async fn try_take(engine: &Arc<Engine>, req: LockRequest) -> Option<Arc<HeldLease>> {
    wait::acquire(engine, req, RENEWED, Deadline::Now)
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn watchdog_renews_every_third_of_the_lease() {
    let (engine, backend) = engine();
    let held = take(&engine, fresh("a", LEASE)).await;
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    // Renewals at 1 s, 2 s, … 10 s.
    assert_eq!(backend.extends.load(Ordering::SeqCst), 10);
    assert!(!held.is_lost());
    assert!(engine.release(&held).await.unwrap());
}

/// 25 holdings taken 10 ms apart, on a store that renews up to 10 in one call: the first round
/// takes those due within a tenth of the lease after it (all of them), and from then on all 25
/// renew together, in 3 calls a round, each holding at least every second as alone (never
/// later). One the store no longer lists is lost alone.
#[tokio::test(start_paused = true)]
async fn renewals_due_together_go_in_batches() {
    let (engine, backend) = engine_with(|b| b.max_batch.store(10, Ordering::SeqCst));
    let mut held = Vec::new();
    for i in 0..25 {
        held.push(take(&engine, fresh(&format!("b{i}"), LEASE)).await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_secs(12)).await;
    let (batches, extends) = (
        backend.batches.load(Ordering::SeqCst),
        backend.extends.load(Ordering::SeqCst),
    );
    // Rounds at 1 s, 2 s, … 12 s after the first take: 12 renewals of each, in 3 batches a round.
    assert!(extends >= 25 * 12, "{extends} renewals");
    assert!(
        batches <= 3 * 12,
        "{batches} batches for {extends} renewals"
    );
    assert!(held.iter().all(|h| !h.is_lost()));

    backend.held.lock().unwrap().remove("b3");
    tokio::time::sleep(LEASE / 2).await;
    let lost: Vec<usize> = (0..25).filter(|&i| held[i].is_lost()).collect();
    assert_eq!(lost, [3]);
}

#[tokio::test(start_paused = true)]
async fn lost_fires_when_the_store_disowns_us() {
    let (engine, backend) = engine();
    let held = take(&engine, fresh("a", LEASE)).await;
    backend.forget_owner.store(true, Ordering::SeqCst);
    let err = tokio::time::timeout(Duration::from_secs(2), held.lost())
        .await
        .expect("lost within one renewal period");
    assert_eq!(err.kind(), ErrorKind::LeaseLost);
    assert!(err.to_string().contains("no longer lists"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn lost_fires_when_renewal_fails_until_the_lease_ends() {
    let (engine, backend) = engine();
    let held = take(&engine, fresh("a", LEASE)).await;
    backend.extend_fails.store(true, Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    let err = held.lost().await;
    let after = started.elapsed();
    assert!(err.to_string().contains("renewal failed"), "{err}");
    // Exactly when the last confirmed lease ends.
    assert_eq!(after, LEASE, "{err}");
    assert!(
        backend.extends.load(Ordering::SeqCst) > 2,
        "renewal was retried"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_past_its_end_is_lost_by_the_clock_alone() {
    let (engine, backend) = engine();
    let held = take(&engine, fresh("a", LEASE)).await;
    // The store never answers a renewal: only the clock can tell.
    backend.extend_hangs.store(true, Ordering::SeqCst);
    tokio::time::sleep(LEASE - Duration::from_millis(1)).await;
    assert!(!held.is_lost());
    let started = tokio::time::Instant::now();
    let err = held.lost().await;
    assert_eq!(started.elapsed(), Duration::from_millis(1), "{err}");
    assert!(held.is_lost());
    assert_eq!(err.kind(), ErrorKind::LeaseLost);
    // A lost holding is not ours to free: the store is not asked.
    assert!(!engine.release(&held).await.unwrap());
    assert_eq!(backend.releases.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn waiting_backs_off_and_respects_the_deadline() {
    let (engine, backend) = engine();
    let _held = take(&engine, fresh("a", LEASE)).await;
    let started = tokio::time::Instant::now();
    let deadline = Deadline::after(Duration::from_millis(500));
    let got = wait::acquire(&engine, fresh("a", LEASE), RENEWED, deadline).await;
    // Held by another, as the store answered: no error, no source.
    assert!(got.unwrap().is_none());
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    // Backoff doubles to 32 ms: far fewer than one try per millisecond.
    let takes = backend.takes.load(Ordering::SeqCst);
    assert!((10..=40).contains(&takes), "{takes} attempts in 500 ms");
}

#[tokio::test(start_paused = true)]
async fn a_local_release_wakes_a_local_waiter_at_once() {
    let (engine, _) = engine();
    let held = take(&engine, fresh("a", LEASE)).await;
    let waiter = tokio::spawn({
        let engine = engine.clone();
        async move {
            // Let the backoff grow to its ceiling before the release.
            let got = take(&engine, fresh("a", LEASE)).await;
            (tokio::time::Instant::now(), got)
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let released_at = tokio::time::Instant::now();
    assert!(engine.release(&held).await.unwrap());
    let (acquired_at, _got) = waiter.await.unwrap();
    assert!(
        acquired_at - released_at < Duration::from_millis(1),
        "woke after {:?}",
        acquired_at - released_at
    );
}

#[tokio::test(start_paused = true)]
async fn reentrant_holds_share_one_watchdog_and_one_holding() {
    let (engine, backend) = engine();
    let owner = OwnerToken::random();
    let first = take(&engine, request("a", &owner, LEASE)).await;
    let second = take(&engine, request("a", &owner, LEASE)).await;
    assert!(Arc::ptr_eq(&first, &second), "one holding per owner");
    assert!(engine.reenter(&first).await.unwrap());
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert_eq!(
        backend.extends.load(Ordering::SeqCst),
        2 + 3,
        "one confirmation per re-entry, then one renewal per period, not per guard"
    );
    assert!(engine.release(&first).await.unwrap());
    assert!(engine.release(&second).await.unwrap());
    assert!(try_take(&engine, fresh("a", LEASE)).await.is_none());
    assert_eq!(
        backend.releases.load(Ordering::SeqCst),
        0,
        "held twice more"
    );
    assert!(engine.release(&first).await.unwrap());
    assert!(try_take(&engine, fresh("a", LEASE)).await.is_some());
}

#[tokio::test(start_paused = true)]
async fn a_stale_holding_never_touches_the_owners_newer_one() {
    let (engine, backend) = engine();
    let owner = OwnerToken::random();
    let short = Duration::from_millis(300);
    let stale = wait::acquire(
        &engine,
        request("a", &owner, short),
        UNRENEWED,
        Deadline::Now,
    )
    .await
    .unwrap()
    .unwrap();
    tokio::time::sleep(short * 2).await;
    // The store forgot the expired holding; the same owner takes a new one.
    backend.held.lock().unwrap().clear();
    let fresh_one = take(&engine, request("a", &owner, short)).await;
    assert!(fresh_one.token > stale.token);
    assert!(stale.is_lost());
    assert!(!engine.reenter(&stale).await.unwrap());
    assert!(!engine.release(&stale).await.unwrap());
    assert!(!fresh_one.is_lost());
    assert!(backend.is_held("a"));
    assert!(engine.release(&fresh_one).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn reentry_is_confirmed_by_the_store() {
    let (engine, backend) = engine();
    let held = take(&engine, fresh("a", LEASE)).await;
    backend.forget_owner.store(true, Ordering::SeqCst);
    assert!(!engine.reenter(&held).await.unwrap());
    assert!(held.is_lost(), "the store's answer marks the holding lost");
}

#[tokio::test(start_paused = true)]
async fn waits_past_the_clock_are_waits_without_end() {
    let (engine, _) = engine();
    let held = take(&engine, fresh("a", LEASE)).await;
    assert!(matches!(Deadline::after(Duration::MAX), Deadline::Never));
    let waiter = tokio::spawn({
        let engine = engine.clone();
        async move {
            let deadline = Deadline::after(Duration::from_secs(u64::MAX));
            wait::acquire(&engine, fresh("a", LEASE), RENEWED, deadline).await
        }
    });
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(!waiter.is_finished());
    assert!(engine.release(&held).await.unwrap());
    assert!(waiter.await.unwrap().unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_acquisition_leaves_nothing_held() {
    let (engine, backend) = engine();
    backend.take_delay_ms.store(10, Ordering::SeqCst);
    for budget_us in [1, 100, 5_000, 8_000] {
        let attempt = wait::acquire(&engine, fresh("a", LEASE), RENEWED, Deadline::Never);
        let outcome = tokio::time::timeout(Duration::from_micros(budget_us), attempt).await;
        assert!(outcome.is_err(), "the take takes 10 ms");
        engine.flush().await;
        assert!(
            !backend.is_held("a"),
            "a take that landed after its caller gave up is released (budget {budget_us} µs)"
        );
    }
    assert_eq!(backend.releases.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_a_slow_attempt_and_the_attempt_is_undone() {
    let (engine, backend) = engine();
    backend.take_delay_ms.store(1_000, Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    let deadline = Deadline::after(Duration::from_millis(200));
    let outcome = wait::acquire(&engine, fresh("slow", LEASE), RENEWED, deadline).await;
    // A timeout, but not "held by another": the store never answered, and the source says so.
    let Err(err) = outcome else {
        panic!("a wait of 200 ms answers timeout");
    };
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let source = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<Error>())
        .expect("a distlock error as the source");
    assert_eq!(source.kind(), ErrorKind::Connection, "{err}");
    assert_eq!(started.elapsed(), Duration::from_millis(200));
    engine.flush().await;
    assert!(
        !backend.is_held("slow"),
        "the take that landed after the deadline is released"
    );
}

#[tokio::test(start_paused = true)]
async fn a_session_that_ends_by_time_is_lost_by_the_clock_and_stays_lost() {
    let (engine, backend) = engine();
    let start = tokio::time::Instant::now();
    let (confirm, until) = tokio::sync::watch::channel(start + Duration::from_secs(3));
    *backend.session_until.lock().unwrap() = Some(until);
    let held = take(&engine, fresh("session", LEASE)).await;
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(!held.is_lost(), "confirmed for 3 s, 2 s in");
    // A keep-alive confirms it until 5 s.
    confirm.send_replace(start + Duration::from_secs(5));
    tokio::task::yield_now().await;
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(!held.is_lost(), "confirmed until 5 s, 4 s in");
    // No keep-alive lands (a pause): lost by the clock alone, before any task has run.
    tokio::time::advance(Duration::from_millis(1_001)).await;
    assert!(held.is_lost(), "past the confirmed end");
    // A confirmation that comes after the end does not bring it back.
    confirm.send_replace(start + Duration::from_secs(60));
    tokio::task::yield_now().await;
    assert!(held.is_lost(), "a loss once seen stays");
    let lost = held.lost().await;
    assert_eq!(lost.kind(), ErrorKind::LeaseLost);
    assert!(lost.to_string().contains("session"), "{lost}");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_checks_the_size_at_its_first_attempt_only() {
    let (engine, backend) = engine();
    let holder = take(&engine, fresh("a", LEASE)).await;
    backend.follows.lock().unwrap().clear();
    let waiter = {
        let engine = engine.clone();
        tokio::spawn(async move {
            wait::acquire(&engine, fresh("a", LEASE), RENEWED, Deadline::Never).await
        })
    };
    // The waiter tries, finds it held, and tries again after the lease left (the fake does
    // not notify): twice at least within two leases.
    tokio::time::sleep(LEASE * 2).await;
    assert!(engine.release(&holder).await.unwrap());
    let got = waiter.await.unwrap().unwrap();
    assert!(got.is_some(), "the waiter got the lock once it was free");
    let follows = backend.follows.lock().unwrap().clone();
    assert!(follows.len() >= 2, "{follows:?}");
    assert!(
        !follows[0],
        "the first attempt must check the semaphore's size"
    );
    assert!(
        follows[1..].iter().all(|f| *f),
        "later attempts go by the size kept (a resize while waiting must not fail them): \
         {follows:?}"
    );
}

#[tokio::test]
async fn unsupported_flavours_are_typed_errors() {
    let (engine, _) = engine();
    for kind in [
        LockKind::Fair,
        LockKind::Read,
        LockKind::Write,
        LockKind::Permit { permits: 3 },
    ] {
        let mut req = fresh("a", LEASE);
        req.kind = kind;
        let err = wait::acquire(&engine, req, RENEWED, Deadline::Now)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    }
}

#[tokio::test(start_paused = true)]
async fn released_holdings_leave_the_renewal_queue() {
    let (engine, _) = engine();
    let mut held = Vec::new();
    for i in 0..100 {
        held.push(take(&engine, fresh(&format!("n{i}"), LEASE)).await);
    }
    assert_eq!(engine.renewals.queued(), 100);
    for lease in &held {
        assert!(engine.release(lease).await.unwrap());
    }
    assert_eq!(
        engine.renewals.queued(),
        0,
        "only live holdings stay queued"
    );
}

/// A store whose grants are sessions that end `expires_after` their holder's last contact (or
/// with its connection), kept alive until an hour from now by the returned sender.
fn session_store(
    expires_after: Option<Duration>,
) -> (
    Arc<Engine>,
    Arc<FakeBackend>,
    tokio::sync::watch::Sender<tokio::time::Instant>,
) {
    let (engine, backend) = engine();
    *backend.caps.lock().unwrap() = Some(Capabilities::sessions(
        expires_after,
        "what sets the bound: the URL's ?expiry=",
    ));
    let (confirm, until) =
        tokio::sync::watch::channel(tokio::time::Instant::now() + Duration::from_secs(3600));
    *backend.session_until.lock().unwrap() = Some(until);
    (engine, backend, confirm)
}

#[tokio::test(start_paused = true)]
async fn a_lease_shorter_than_the_session_expiry_is_refused_and_the_default_raised() {
    let (engine, backend, _alive) = session_store(Some(Duration::from_secs(40)));
    for terms in [RENEWED, UNRENEWED] {
        let err = wait::acquire(
            &engine,
            fresh("a", Duration::from_secs(39)),
            terms,
            Deadline::Now,
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidLease, "{err}");
        let message = err.to_string();
        assert!(
            message.contains("39s") && message.contains("40s") && message.contains("?expiry="),
            "the refusal names the lease, the bound and what sets it: {message}"
        );
    }
    assert_eq!(
        backend.takes.load(Ordering::SeqCst),
        0,
        "refused before asking the store"
    );
    let kept = try_take(&engine, fresh("a", Duration::from_secs(40)))
        .await
        .expect("a lease the session keeps is taken");
    assert!(engine.release(&kept).await.unwrap());
    let default = Terms {
        renew: true,
        lease_set: false,
        max_hold: None,
    };
    let defaulted = wait::acquire(
        &engine,
        fresh("a", Lease::DEFAULT.duration()),
        default,
        Deadline::Now,
    )
    .await
    .unwrap()
    .expect("the default lease is never refused");
    assert_eq!(
        defaulted.req.lease.duration(),
        Duration::from_secs(40),
        "the default lease is raised to the session's expiry"
    );
}

#[tokio::test(start_paused = true)]
async fn sessions_of_a_connection_refuse_a_set_lease_and_no_watchdog() {
    let (engine, backend, _alive) = session_store(None);
    let refused = [
        (RENEWED, "a lease (3s)"),
        (
            Terms {
                renew: false,
                lease_set: false,
                max_hold: None,
            },
            "no_watchdog",
        ),
    ];
    for (terms, what) in refused {
        let err = wait::acquire(&engine, fresh("a", LEASE), terms, Deadline::Now)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidLease, "{err}");
        assert!(
            err.to_string().contains(what) && err.to_string().contains("?expiry="),
            "{err}"
        );
    }
    assert_eq!(backend.takes.load(Ordering::SeqCst), 0);
    let default = Terms {
        renew: true,
        lease_set: false,
        max_hold: None,
    };
    let held = wait::acquire(&engine, fresh("a", LEASE), default, Deadline::Now)
        .await
        .unwrap()
        .expect("the default lease is taken: the holding is the connection's");
    assert!(engine.release(&held).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn an_unrenewed_session_hold_ends_at_its_lease_and_is_freed_in_the_store() {
    let (engine, backend, _alive) = session_store(Some(LEASE));
    let lease = Duration::from_secs(5);
    let started = tokio::time::Instant::now();
    let held = wait::acquire(&engine, fresh("a", lease), UNRENEWED, Deadline::Now)
        .await
        .unwrap()
        .unwrap();
    // Re-entry restarts the lease, as it does a lease hold's: it ends 5 s after the re-entry.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(engine.reenter(&held).await.unwrap());
    tokio::time::sleep(lease - Duration::from_millis(1)).await;
    assert!(
        !held.is_lost(),
        "its session lives and its lease has 1 ms left"
    );
    assert!(backend.is_held("a"));
    let lost = held.lost().await;
    assert_eq!(started.elapsed(), Duration::from_secs(7), "{lost}");
    assert!(lost.to_string().contains("renewal is off"), "{lost}");
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    assert!(
        !backend.is_held("a"),
        "the client freed the holding in the store when its lease ended"
    );
    // Two guards (the re-entry): the last one's release asks the store again, by the holding's
    // token (the task that freed it may not have run), and finds it gone.
    assert!(!engine.release(&held).await.unwrap());
    assert!(!engine.release(&held).await.unwrap());
    assert_eq!(backend.releases.load(Ordering::SeqCst), 2);
}
