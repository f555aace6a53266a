//! Wake-ups for a store that cannot notify (MySQL): each client runs one poller per watched
//! synchronizer, shared by all of its waiters there, instead of every waiter polling the store
//! on its own timer. The poller reads the synchronizer and, when what it read changed (a
//! release, a lapsed lease or place, a waiter joining or leaving), wakes only the waiters whose
//! take could now succeed: in a fair lock's line that is its head alone, so a hand-over costs
//! one read per client and one take, not one read per waiter.
//!
//! The poller reads again soon after a change (1 ms, doubling to 32 ms while nothing changes),
//! so hand-overs in a busy line are seen within milliseconds, while a long holding costs each
//! client one read per 32 ms whatever its number of waiters. It stops with its last
//! subscriber. A read that fails is logged and tried again: waiters still ask by their own
//! timers (bounded by the lease left, and by a place's life in a line), so a failing watch
//! costs latency, never a hang.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use crate::backend::Wakeups;
use crate::backends::sql_family::{Read, Wants};

/// The longest pause between two reads, once nothing has changed for a while.
const SLOWEST: Duration = Duration::from_millis(32);

/// The pollers of one client, by the key of what they watch.
pub(crate) struct PollWatch<T> {
    by_key: Arc<Mutex<HashMap<String, Arc<Poller<T>>>>>,
}

impl<T> Default for PollWatch<T> {
    fn default() -> Self {
        PollWatch {
            by_key: Default::default(),
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
            tokio::spawn(poll(self.by_key.clone(), key, poller.clone(), read));
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
) {
    let mut last = None;
    let mut pause = Duration::from_millis(1);
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
        match read().await {
            Ok((seen, state)) if last != Some(seen) => {
                last = Some(seen);
                pause = Duration::from_millis(1);
                let subscribers = poller.subscribers.lock().unwrap_or_else(|p| p.into_inner());
                for subscriber in subscribers.iter().filter_map(Weak::upgrade) {
                    if (subscriber.wants)(&state) {
                        subscriber.woken.notify_one();
                    }
                }
            }
            Ok(_) => pause = (pause * 2).min(SLOWEST),
            Err(e) => {
                tracing::debug!("watching {key:?} for waiters failed, trying again: {e}");
                pause = SLOWEST;
            }
        }
        tokio::time::sleep(pause).await;
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

    async fn woken(wakeups: &mut Wakeups) -> bool {
        tokio::time::timeout(Duration::from_millis(300), wakeups.next())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_change_wakes_only_the_waiters_it_lets_in_and_the_poller_ends_with_them() {
        let watch = PollWatch::<u64>::default();
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
}
