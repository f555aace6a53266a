//! Wake-ups for a store that cannot notify (MySQL, object stores): each client runs one poller
//! per watched synchronizer, shared by all of its waiters there, instead of every waiter
//! polling the store on its own timer. The poller reads the synchronizer and, when what it
//! read changed (a release, a lapsed lease or place, a waiter joining or leaving), wakes the
//! waiters whose take could now succeed: in a fair lock's line that is its head alone, so a
//! hand-over costs one read per client and one take, not one read per waiter. Where any
//! waiter's take would do (an exclusive lock), it wakes one of them, in turn ([`Wake::One`]).
//!
//! The poller reads again soon after a change (its [`Pace`]'s fastest, doubling to its
//! slowest while nothing changes), so hand-overs in a busy line are seen within milliseconds,
//! while a long holding costs each client one read per slowest pause whatever its number of
//! waiters. It stops with its last subscriber. A read that fails is logged and tried again:
//! waiters still ask by their own timers (bounded by the lease left, and by a place's life in
//! a line), so a failing watch costs latency, never a hang.

// PostgreSQL alone is notified, and names only the `Read` and `Wants` of its dialect's trait.
#![cfg_attr(
    not(any(feature = "mysql", feature = "object-store")),
    allow(dead_code)
)]

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use crate::backend::Wakeups;
use crate::error::Result;

/// Reads a synchronizer for a poller: what waiters judge, and a fingerprint of it that differs
/// whenever a waiter's take might now give another answer.
pub(crate) type Read<T> =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(u64, T)>> + Send>> + Send + Sync>;

/// Whether a waiter's take could succeed, given what a poller read.
pub(crate) type Wants<T> = Box<dyn Fn(&T) -> bool + Send + Sync>;

/// How often a poller reads: `fastest` right after a change, doubling to `slowest` while
/// nothing changes; and, with `round_trips` above 0, never sooner than that many times the
/// last read's round trip (up to `slowest`): a store slowed by load gets fewer reads from each
/// poller, which leaves it more time for the holders' own steps.
#[derive(Clone, Copy)]
pub(crate) struct Pace {
    pub(crate) fastest: Duration,
    pub(crate) slowest: Duration,
    pub(crate) round_trips: u32,
}

/// Whom a change wakes, of the waiters it lets in.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Wake {
    /// Each of them: their takes may all succeed (a semaphore's permits, readers), or the
    /// rules let in one the poller cannot single out.
    Each,
    /// One of them, the one woken longest ago: only one take can succeed (an exclusive
    /// lock), and waking the rest would only send takes that lose to it. While what the
    /// poller reads still lets a waiter in, each read wakes the next one (the one woken may
    /// have given up, or lost the race to another client, which changes what is read).
    One,
}

/// The pollers of one client, by the key of what they watch.
pub(crate) struct PollWatch<T> {
    by_key: Arc<Mutex<HashMap<String, Arc<Poller<T>>>>>,
    pace: Pace,
    wake: Wake,
}

impl<T> PollWatch<T> {
    pub(crate) fn new(pace: Pace, wake: Wake) -> Self {
        PollWatch {
            by_key: Default::default(),
            pace,
            wake,
        }
    }
}

struct Poller<T> {
    subscribers: Mutex<Vec<Weak<Subscriber<T>>>>,
}

struct Subscriber<T> {
    wants: Wants<T>,
    /// Keeps a wake-up that comes while the waiter is busy taking (`notify_one` stores it).
    woken: Notify,
}

impl<T: Send + Sync + 'static> PollWatch<T> {
    /// A stream of wake-ups for `key`, read by `read`, for a waiter that `wants`: starts the
    /// key's poller, or joins it. The first item comes with the first read after this call
    /// that `wants` (a change between the waiter's last take and that read is in it).
    pub(crate) fn subscribe(&self, key: String, read: Read<T>, wants: Wants<T>) -> Wakeups {
        let subscriber = Arc::new(Subscriber {
            wants,
            woken: Notify::new(),
        });
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        let poller = by_key.entry(key.clone()).or_insert_with(|| {
            let poller = Arc::new(Poller {
                subscribers: Mutex::new(Vec::new()),
            });
            let (pace, wake) = (self.pace, self.wake);
            tokio::spawn(poll(
                self.by_key.clone(),
                key,
                poller.clone(),
                read,
                pace,
                wake,
            ));
            poller
        });
        poller
            .subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(&subscriber));
        Box::pin(futures_util::stream::unfold(
            subscriber,
            |subscriber| async move {
                subscriber.woken.notified().await;
                Some(((), subscriber))
            },
        ))
    }
}

/// The poller of `key`: reads, wakes the subscribers a change lets in, ends when nobody
/// listens.
async fn poll<T>(
    by_key: Arc<Mutex<HashMap<String, Arc<Poller<T>>>>>,
    key: String,
    poller: Arc<Poller<T>>,
    read: Read<T>,
    pace: Pace,
    wake: Wake,
) {
    let mut last = None;
    let mut pause = pace.fastest;
    loop {
        {
            // Under the map's lock, so a subscriber never joins a poller that is ending.
            let mut map = by_key.lock().unwrap_or_else(|p| p.into_inner());
            let mut subscribers = poller.subscribers.lock().unwrap_or_else(|p| p.into_inner());
            subscribers.retain(|s| s.strong_count() > 0);
            if subscribers.is_empty() {
                map.remove(&key);
                return;
            }
        }
        let sent = tokio::time::Instant::now();
        match read().await {
            Ok((seen, state)) => {
                let changed = last != Some(seen);
                if changed {
                    last = Some(seen);
                    pause = pace.fastest;
                } else {
                    pause = (pause * 2).min(pace.slowest);
                }
                let round_trip = sent.elapsed();
                pause = pause.max((round_trip * pace.round_trips).min(pace.slowest));
                // Waking one, a state that still lets a waiter in is offered to the next: the
                // one woken may have given up without trying.
                if changed || wake == Wake::One {
                    let mut subscribers =
                        poller.subscribers.lock().unwrap_or_else(|p| p.into_inner());
                    wake_up(&mut subscribers, &state, wake);
                }
            }
            Err(e) => {
                tracing::debug!("watching {key:?} for waiters failed, trying again: {e}");
                pause = pace.slowest;
            }
        }
        tokio::time::sleep(pause).await;
    }
}

/// Wakes the subscribers `state` lets in: each, or the first of them, which then goes to the
/// back of the line (so a client's waiters are woken in turn, none left behind).
fn wake_up<T>(subscribers: &mut Vec<Weak<Subscriber<T>>>, state: &T, wake: Wake) {
    let mut woken = None;
    for (at, subscriber) in subscribers.iter().enumerate() {
        let Some(subscriber) = subscriber.upgrade() else {
            continue;
        };
        if (subscriber.wants)(state) {
            subscriber.woken.notify_one();
            if wake == Wake::One {
                woken = Some(at);
                break;
            }
        }
    }
    if let Some(at) = woken {
        let subscriber = subscribers.remove(at);
        subscribers.push(subscriber);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A synchronizer stand-in: its state is a number the test sets.
    fn reading(state: &Arc<AtomicU64>) -> Read<u64> {
        let state = state.clone();
        Arc::new(move || {
            let now = state.load(Ordering::SeqCst);
            Box::pin(async move { Ok((now, now)) })
        })
    }

    const PACE: Pace = Pace {
        fastest: Duration::from_millis(1),
        slowest: Duration::from_millis(32),
        round_trips: 0,
    };

    async fn woken(wakeups: &mut Wakeups) -> bool {
        tokio::time::timeout(Duration::from_millis(300), wakeups.next())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_change_wakes_only_the_waiters_it_lets_in_and_the_poller_ends_with_them() {
        let watch = PollWatch::<u64>::new(PACE, Wake::Each);
        let state = Arc::new(AtomicU64::new(0));
        let mut even = watch.subscribe("k".into(), reading(&state), Box::new(|s| s % 2 == 0));
        let mut odd = watch.subscribe("k".into(), reading(&state), Box::new(|s| s % 2 == 1));
        // The first read wakes whoever it lets in.
        assert!(woken(&mut even).await);
        assert!(!woken(&mut odd).await);
        // Nothing changed: nobody is woken again.
        assert!(!woken(&mut even).await);
        state.store(1, Ordering::SeqCst);
        assert!(woken(&mut odd).await);
        assert!(!woken(&mut even).await);
        state.store(2, Ordering::SeqCst);
        assert!(woken(&mut even).await);
        assert_eq!(watch.by_key.lock().unwrap().len(), 1, "one poller per key");
        drop((even, odd));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            watch.by_key.lock().unwrap().is_empty(),
            "the poller ended with its last subscriber"
        );
    }

    #[tokio::test]
    async fn waking_one_wakes_the_waiters_in_turn_and_the_next_if_nobody_took_it() {
        use futures_util::future::select_all;
        // The test and the poller share one thread: nothing is read between a wake-up and
        // the test's answer to it.
        let pace = Pace {
            fastest: Duration::from_millis(50),
            slowest: Duration::from_millis(50),
            round_trips: 0,
        };
        let watch = PollWatch::<u64>::new(pace, Wake::One);
        let state = Arc::new(AtomicU64::new(1));
        let mut waiters: Vec<Wakeups> = (0..3)
            .map(|_| watch.subscribe("k".into(), reading(&state), Box::new(|s| s % 2 == 0)))
            .collect();
        let mut order = Vec::new();
        for round in 1..=6u64 {
            // Free: one waiter is woken, and takes it (odd: taken) before the next read.
            state.store(round * 2, Ordering::SeqCst);
            let (_, woken, _) = select_all(waiters.iter_mut().map(|w| w.next())).await;
            state.store(round * 2 + 1, Ordering::SeqCst);
            order.push(woken);
            tokio::time::sleep(Duration::from_millis(120)).await;
        }
        assert_eq!(order, [0, 1, 2, 0, 1, 2], "each in turn");
        // Free, and the waiter woken does not take it: the next read wakes the next one.
        state.store(100, Ordering::SeqCst);
        let mut woken = Vec::new();
        for _ in 0..2 {
            let (_, w, _) = select_all(waiters.iter_mut().map(|w| w.next())).await;
            woken.push(w);
        }
        assert_eq!(woken, [0, 1]);
    }

    /// A slow store gets fewer reads: with `round_trips`, a poller whose reads take 30 ms waits
    /// 120 ms between them even while what it reads keeps changing.
    #[tokio::test(start_paused = true)]
    async fn a_slow_read_spaces_the_next_ones() {
        let reads = Arc::new(AtomicU64::new(0));
        let read: Read<u64> = {
            let reads = reads.clone();
            Arc::new(move || {
                // Every read sees a change, as on a lock handed over all the time.
                let n = reads.fetch_add(1, Ordering::SeqCst) + 1;
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    Ok((n, n))
                })
            })
        };
        for (round_trips, most, least) in [(0, 40, 25), (4, 7, 6)] {
            reads.store(0, Ordering::SeqCst);
            let pace = Pace {
                fastest: Duration::from_millis(1),
                slowest: Duration::from_secs(1),
                round_trips,
            };
            let watch = PollWatch::<u64>::new(pace, Wake::Each);
            let waiter = watch.subscribe("k".into(), read.clone(), Box::new(|_| false));
            tokio::time::sleep(Duration::from_secs(1)).await;
            let n = reads.load(Ordering::SeqCst);
            assert!(
                (least..=most).contains(&n),
                "{n} reads in 1 s with round_trips {round_trips}, expected {least}..={most}"
            );
            drop(waiter);
        }
    }
}
