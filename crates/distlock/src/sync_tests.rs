//! Unit tests of the election and latch recipes with paused Tokio time over a fake in-memory
//! [`Backend`] (a stand-in for the *trait*: every store is tested for real by the testkit suite).
//! The fake does not notify, so these also exercise the polling fallback; it keeps the
//! exclusive lock alone and has no semaphores or inspection, so it also shows what a client
//! answers for what its store lacks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use tokio::time::Instant;

use crate::backend::{
    Attempt, Backend, Capabilities, ElectionEntry, ElectionWrite, Elections, Latches, LockRequest,
};
use crate::error::{ErrorKind, Result};
use crate::types::{FencingToken, LockKind, LockName};
use crate::{Client, Leader};

/// Locks (name → owner, token, lease end), election records and latch counts in maps.
#[derive(Debug, Default)]
struct FakeStore {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    locks: HashMap<String, (String, u64, Instant)>,
    next_token: u64,
    elections: HashMap<String, ElectionState>,
    latches: HashMap<String, u64>,
}

#[derive(Debug, Default)]
struct ElectionState {
    max_term: u64,
    live_until: Option<Instant>,
    log: Vec<ElectionEntry>,
}

#[async_trait]
impl Backend for FakeStore {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leases()
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        let mut s = self.state.lock().unwrap();
        let now = Instant::now();
        if let Some((owner, token, until)) = s.locks.get(req.name.as_str())
            && *until > now
        {
            if owner == req.owner.as_str() {
                return Ok(Attempt::leased(FencingToken(*token), req));
            }
            return Ok(Attempt::Held {
                retry_after: Some(*until - now),
            });
        }
        s.next_token += 1;
        let token = s.next_token;
        let until = now + req.lease.duration();
        s.locks.insert(
            req.name.to_string(),
            (req.owner.as_str().to_string(), token, until),
        );
        Ok(Attempt::leased(FencingToken(token), req))
    }

    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<Option<Duration>> {
        let mut s = self.state.lock().unwrap();
        match s.locks.get_mut(req.name.as_str()) {
            Some((owner, t, until))
                if owner == req.owner.as_str() && *t == token.get() && *until > Instant::now() =>
            {
                *until = Instant::now() + req.lease.duration();
                Ok(Some(req.lease.duration()))
            }
            _ => Ok(None),
        }
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        let mut s = self.state.lock().unwrap();
        let ours = s.locks.get(req.name.as_str()).is_some_and(|(o, t, _)| {
            o == req.owner.as_str() && token.is_none_or(|token| *t == token.get())
        });
        if ours {
            s.locks.remove(req.name.as_str());
        }
        Ok(ours)
    }

    crate::backend::offers!(elections, latches);
}

#[async_trait]
impl Elections for FakeStore {
    async fn elect_write(&self, write: ElectionWrite<'_>) -> Result<bool> {
        let mut s = self.state.lock().unwrap();
        let e = s.elections.entry(write.election.to_string()).or_default();
        if write.term.get() < e.max_term {
            return Ok(false);
        }
        let latest = e.log.last();
        let same =
            latest.is_some_and(|l| l.term == write.term && l.value.as_deref() == write.value);
        if !same {
            let seq = latest.map_or(1, |l| l.seq + 1);
            e.log.push(ElectionEntry::new(
                seq,
                write.term,
                write.value.map(str::to_string),
            ));
        }
        e.max_term = write.term.get();
        e.live_until = write.value.map(|_| Instant::now() + write.ttl);
        Ok(true)
    }

    async fn elect_current(&self, election: &LockName) -> Result<Option<ElectionEntry>> {
        let s = self.state.lock().unwrap();
        Ok(s.elections.get(election.as_str()).and_then(|e| {
            e.live_until
                .filter(|until| *until > Instant::now())
                .and_then(|_| e.log.last().cloned())
                .filter(|l| l.value.is_some())
        }))
    }

    async fn elect_log(
        &self,
        election: &LockName,
        after: Option<u64>,
    ) -> Result<Vec<ElectionEntry>> {
        let s = self.state.lock().unwrap();
        let Some(e) = s.elections.get(election.as_str()) else {
            return Ok(Vec::new());
        };
        Ok(match after {
            None => e.log.last().cloned().into_iter().collect(),
            Some(after) => e.log.iter().filter(|l| l.seq > after).cloned().collect(),
        })
    }
}

#[async_trait]
impl Latches for FakeStore {
    async fn latch_set(&self, latch: &LockName, count: u64) -> Result<bool> {
        let mut s = self.state.lock().unwrap();
        let c = s.latches.entry(latch.to_string()).or_default();
        if *c > 0 {
            return Ok(false);
        }
        *c = count;
        Ok(true)
    }

    async fn latch_count_down(&self, latch: &LockName) -> Result<u64> {
        let mut s = self.state.lock().unwrap();
        let c = s.latches.entry(latch.to_string()).or_default();
        *c = c.saturating_sub(1);
        Ok(*c)
    }

    async fn latch_count(&self, latch: &LockName) -> Result<u64> {
        let s = self.state.lock().unwrap();
        Ok(s.latches.get(latch.as_str()).copied().unwrap_or(0))
    }
}

fn client() -> (Client, Arc<FakeStore>) {
    let store = Arc::new(FakeStore::default());
    (Client::from_backend(store.clone()), store)
}

fn leader(value: &str, term: u64) -> Leader {
    Leader {
        value: value.to_string(),
        term: FencingToken(term),
    }
}

async fn write(store: &FakeStore, term: u64, value: Option<&str>) -> bool {
    let name = LockName::new("e").unwrap();
    store
        .elect_write(ElectionWrite::new(
            &name,
            FencingToken(term),
            value,
            Duration::from_secs(10),
        ))
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_observer_sees_every_term_even_when_several_pass_between_its_reads() {
    let (client, store) = client();
    let mut leaders = Box::pin(client.election("e").observe().await.unwrap());
    // Nothing yet: the first read finds no leader and waits.
    assert!(
        tokio::time::timeout(Duration::from_millis(50), leaders.next())
            .await
            .is_err()
    );
    // Five hand-overs before the observer reads again.
    for term in 1..=5 {
        assert!(write(&store, term, Some(&format!("v{term}"))).await);
        assert!(write(&store, term, None).await);
    }
    for term in 1..=5 {
        let next = leaders.next().await.unwrap().unwrap();
        assert_eq!(next, leader(&format!("v{term}"), term));
    }
}

#[tokio::test(start_paused = true)]
async fn an_observer_starts_at_the_live_leader_skips_refreshes_and_sees_new_values() {
    let (client, store) = client();
    assert!(write(&store, 3, Some("a")).await);
    let mut leaders = Box::pin(client.election("e").observe().await.unwrap());
    assert_eq!(leaders.next().await.unwrap().unwrap(), leader("a", 3));
    // A refresh (same term, same value) is not a change; a new value in the term is.
    assert!(write(&store, 3, Some("a")).await);
    assert!(write(&store, 3, Some("b")).await);
    assert_eq!(leaders.next().await.unwrap().unwrap(), leader("b", 3));
    // A stale term is refused and never seen.
    assert!(!write(&store, 2, Some("old")).await);
    assert!(write(&store, 4, Some("c")).await);
    assert_eq!(leaders.next().await.unwrap().unwrap(), leader("c", 4));
}

#[tokio::test(start_paused = true)]
async fn the_leaders_record_is_refreshed_while_it_leads_and_resign_ends_the_term() {
    let (client, _store) = client();
    let election = client.election("e").lease(Duration::from_millis(300));
    let first = election.campaign("a").await.unwrap();
    // Many leases later the record is still live: the leader refreshes it every lease/3.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        election.leader().await.unwrap(),
        Some(leader("a", first.term().get()))
    );
    let term = first.term();
    assert!(first.resign().await.unwrap());
    assert_eq!(election.leader().await.unwrap(), None);
    let second = election.campaign("b").await.unwrap();
    assert!(second.term() > term);
    // A dropped leadership resigns in the background.
    drop(second);
    client.flush().await;
    assert_eq!(election.leader().await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn a_second_campaigner_waits_and_takes_over_after_a_resign() {
    let (client, _store) = client();
    let election = client.election("e").lease(Duration::from_millis(300));
    let first = election.campaign("a").await.unwrap();
    let timed_out = election
        .campaign_timeout("b", Duration::from_millis(500))
        .await
        .unwrap_err();
    assert_eq!(timed_out.kind(), ErrorKind::Timeout);
    let waiting = tokio::spawn({
        let election = election.clone();
        async move { election.campaign("b").await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let term = first.term();
    first.resign().await.unwrap();
    let second = waiting.await.unwrap().unwrap();
    assert!(second.term() > term);
    assert_eq!(second.value(), "b");
}

#[tokio::test(start_paused = true)]
async fn a_latch_wait_timeout_times_out_on_time_and_a_count_down_releases_waiters() {
    let (client, _store) = client();
    let latch = client.latch("l");
    assert!(latch.try_set_count(2).await.unwrap());
    let started = Instant::now();
    let err = latch
        .wait_timeout(Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_millis(5_300),
        "{waited:?}"
    );
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let latch = latch.clone();
            tokio::spawn(async move { latch.wait().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(latch.count_down().await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()));
    assert_eq!(latch.count_down().await.unwrap(), 0);
    let released = Instant::now();
    for w in waiters {
        w.await.unwrap().unwrap();
    }
    // Polling (the fake cannot notify): within the longest poll nap.
    assert!(released.elapsed() <= crate::core::changes::POLL_MAX);
}

/// What the store lacks (a flavour, semaphore sizing, inspection) is refused by the client, as
/// `Unsupported` naming the backend and what it lacks, before anything reaches the store.
#[tokio::test]
async fn what_the_store_lacks_is_refused_by_name() {
    let (client, store) = client();
    assert!(client.supports(LockKind::Mutex));
    assert!(!client.supports(LockKind::Fair));
    let refusals = [
        client.status("a").await.map(|_| ()),
        client.status_prefix("").await.map(|_| ()),
        client.force_release("a", LockKind::Mutex).await.map(|_| ()),
        client.force_release("a", LockKind::Read).await.map(|_| ()),
        client.set_semaphore_permits("s", 2).await.map(|_| ()),
        client
            .semaphore("s", 2)
            .available_permits()
            .await
            .map(|_| ()),
        client.fair_lock("f").try_acquire().await.map(|_| ()),
    ];
    let messages: Vec<String> = refusals
        .into_iter()
        .map(|refused| {
            let e = refused.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
            assert_eq!(e.backend(), "fake");
            e.message().to_string()
        })
        .collect();
    let lacks = |what: &str| format!("the fake backend does not support {what}");
    assert_eq!(
        messages,
        [
            lacks("lock status"),
            lacks("lock status"),
            lacks("forced release"),
            lacks("read locks"),
            lacks("semaphores"),
            lacks("semaphores"),
            lacks("fair locks"),
        ]
    );
    assert!(
        store.state.lock().unwrap().locks.is_empty(),
        "nothing was taken"
    );
}
