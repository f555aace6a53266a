//! Unit tests of the core with paused Tokio time and a fake in-memory [`Backend`] (a stand-in
//! for the *trait*, not for any store: every store is tested for real by the testkit suite).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{Attempt, Backend, Capabilities, LockRequest};
use crate::error::{Error, ErrorKind, Result};
use crate::types::FencingToken;
use crate::{Client, OwnerToken};

/// Locks in a map (name → owner, token), with switches to make renewal fail or hang.
#[derive(Debug, Default)]
struct FakeBackend {
    held: Mutex<HashMap<String, (String, u64)>>,
    next_token: AtomicU32,
    extends: AtomicU32,
    takes: AtomicU32,
    releases: AtomicU32,
    extend_fails: AtomicBool,
    extend_hangs: AtomicBool,
    forget_owner: AtomicBool,
}

#[async_trait]
impl Backend for FakeBackend {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            notifies: false,
            renews: true,
            queues: false,
        }
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        self.takes.fetch_add(1, Ordering::SeqCst);
        let mut held = self.held.lock().unwrap();
        match held.get(req.name.as_str()) {
            Some((owner, token)) if owner == req.owner.as_str() => Ok(Attempt::Acquired {
                token: FencingToken(*token),
                session_lost: None,
            }),
            Some(_) => Ok(Attempt::Held {
                retry_after: Some(req.lease.duration()),
            }),
            None => {
                let token = u64::from(self.next_token.fetch_add(1, Ordering::SeqCst) + 1);
                held.insert(
                    req.name.to_string(),
                    (req.owner.as_str().to_string(), token),
                );
                Ok(Attempt::Acquired {
                    token: FencingToken(token),
                    session_lost: None,
                })
            }
        }
    }

    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<bool> {
        self.extends.fetch_add(1, Ordering::SeqCst);
        if self.extend_hangs.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if self.extend_fails.load(Ordering::SeqCst) {
            return Err(Error::new(ErrorKind::Connection, "store unreachable"));
        }
        if self.forget_owner.load(Ordering::SeqCst) {
            return Ok(false);
        }
        let held = self.held.lock().unwrap();
        Ok(held
            .get(req.name.as_str())
            .is_some_and(|(o, t)| o == req.owner.as_str() && *t == token.get()))
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

fn client() -> (Client, Arc<FakeBackend>) {
    let backend = Arc::new(FakeBackend::default());
    (Client::from_backend(backend.clone()), backend)
}

#[tokio::test(start_paused = true)]
async fn watchdog_renews_every_third_of_the_lease() {
    let (client, backend) = client();
    let guard = client
        .lock("a")
        .lease(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    // Renewals at 1 s, 2 s, … 10 s.
    assert_eq!(backend.extends.load(Ordering::SeqCst), 10);
    assert!(!guard.is_lost());
    assert!(guard.release().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn lost_fires_when_the_store_disowns_us() {
    let (client, backend) = client();
    let guard = client
        .lock("a")
        .lease(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    backend.forget_owner.store(true, Ordering::SeqCst);
    let err = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("lost within one renewal period");
    assert_eq!(err.kind(), ErrorKind::LeaseLost);
    assert!(err.to_string().contains("no longer lists"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn lost_fires_when_renewal_fails_until_the_lease_ends() {
    let (client, backend) = client();
    let guard = client
        .lock("a")
        .lease(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    backend.extend_fails.store(true, Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    let err = guard.lost().await;
    let after = started.elapsed();
    assert!(err.to_string().contains("renewal failed"), "{err}");
    // Not before the lease could have ended, and promptly after.
    assert!(
        after >= Duration::from_secs(2) && after <= Duration::from_millis(3_300),
        "{after:?}"
    );
    assert!(
        backend.extends.load(Ordering::SeqCst) > 2,
        "renewal was retried"
    );
}

#[tokio::test(start_paused = true)]
async fn waiting_backs_off_and_respects_the_deadline() {
    let (client, backend) = client();
    let _held = client.lock("a").acquire().await.unwrap();
    let started = tokio::time::Instant::now();
    let err = client
        .lock("a")
        .acquire_timeout(Duration::from_millis(500))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    // Backoff doubles to 32 ms: far fewer than one try per millisecond.
    let takes = backend.takes.load(Ordering::SeqCst);
    assert!((10..=40).contains(&takes), "{takes} attempts in 500 ms");
}

#[tokio::test(start_paused = true)]
async fn a_local_release_wakes_a_local_waiter_at_once() {
    let (client, _) = client();
    let held = client.lock("a").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let client = client.clone();
        async move {
            // Let the backoff grow to its ceiling before the release.
            let g = client.lock("a").acquire().await.unwrap();
            (tokio::time::Instant::now(), g)
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let released_at = tokio::time::Instant::now();
    assert!(held.release().await.unwrap());
    let (acquired_at, _g) = waiter.await.unwrap();
    assert!(
        acquired_at - released_at < Duration::from_millis(1),
        "woke after {:?}",
        acquired_at - released_at
    );
}

#[tokio::test(start_paused = true)]
async fn reentrant_guards_share_one_watchdog() {
    let (client, backend) = client();
    let owner = OwnerToken::random();
    let lock = client.lock("a").owner(owner).lease(Duration::from_secs(3));
    let first = lock.acquire().await.unwrap();
    let second = lock.acquire().await.unwrap();
    let third = second.reenter().await.unwrap();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert_eq!(
        backend.extends.load(Ordering::SeqCst),
        2 + 3,
        "one confirmation per re-entry, then one renewal per period, not per guard"
    );
    assert!(first.release().await.unwrap());
    assert!(second.release().await.unwrap());
    assert!(client.lock("a").try_acquire().await.unwrap().is_none());
    assert!(third.release().await.unwrap());
    assert!(client.lock("a").try_acquire().await.unwrap().is_some());
}

#[tokio::test]
async fn unsupported_flavours_are_typed_errors() {
    let (client, _) = client();
    for lock in [
        client.fair_lock("a"),
        client.rw_lock("a").read(),
        client.rw_lock("a").write(),
        client.semaphore("a", 3),
    ] {
        let err = lock.try_acquire().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_past_its_end_is_lost_by_the_clock_alone() {
    let (client, backend) = client();
    let guard = client
        .lock("a")
        .lease(Duration::from_secs(3))
        .acquire()
        .await
        .unwrap();
    // The store never answers a renewal: only the clock can tell.
    backend.extend_hangs.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(2_999)).await;
    assert!(!guard.is_lost());
    let started = tokio::time::Instant::now();
    let err = guard.lost().await;
    assert_eq!(started.elapsed(), Duration::from_millis(1), "{err}");
    assert!(guard.is_lost());
    assert_eq!(err.kind(), ErrorKind::LeaseLost);
    // A lost holding is not ours to free: the store is not asked.
    assert!(!guard.release().await.unwrap());
    assert_eq!(backend.releases.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_stale_guard_never_touches_the_owners_newer_holding() {
    let (client, backend) = client();
    let owner = OwnerToken::random();
    let lock = client
        .lock("a")
        .owner(owner)
        .lease(Duration::from_millis(300))
        .no_watchdog();
    let stale = lock.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    // The store forgot the expired holding; the same owner takes a new one.
    backend.held.lock().unwrap().clear();
    let fresh = lock.acquire().await.unwrap();
    assert!(fresh.fencing_token() > stale.fencing_token());
    assert!(stale.is_lost());
    let err = stale.reenter().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(!stale.release().await.unwrap());
    assert!(!fresh.is_lost());
    assert!(client.lock("a").try_acquire().await.unwrap().is_none());
    assert!(fresh.release().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn reentry_is_confirmed_by_the_store() {
    let (client, backend) = client();
    let guard = client.lock("a").acquire().await.unwrap();
    backend.forget_owner.store(true, Ordering::SeqCst);
    let err = guard.reenter().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{err}");
    assert!(guard.is_lost(), "the store's answer marks the holding lost");
}

#[tokio::test(start_paused = true)]
async fn waits_past_the_clock_are_waits_without_end() {
    let (client, _) = client();
    let held = client.lock("a").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .lock("a")
                .acquire_timeout(Duration::MAX)
                .await
                .map(|g| g.fencing_token())
        }
    });
    let multi = client.multi_lock(["b", "c"]);
    assert_eq!(
        multi
            .acquire_timeout(Duration::MAX)
            .await
            .unwrap()
            .guards()
            .len(),
        2
    );
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(!waiter.is_finished());
    assert!(held.release().await.unwrap());
    assert!(waiter.await.unwrap().is_ok());
    let free = client
        .lock("d")
        .acquire_timeout(Duration::from_secs(u64::MAX))
        .await;
    assert!(free.is_ok());
}
