//! Waking waiters: one listening connection per client (`LISTEN distlock_released`), shared by
//! every waiter of every lock. The release statement sends `pg_notify('distlock_released', name)`
//! in its own transaction, so the notice arrives only once the lock is really free.
//!
//! The same connection listens on `distlock_changed` for election entries and latches reaching 0
//! (payload `e:NAME` or `l:NAME`); those wake *every* watcher of the name ([`Broadcasts`]):
//! each observer and each latch waiter must read again, not just one.
//!
//! The listener starts with the first waiter and stays. When its connection breaks, every waiter
//! is woken (notices may have been missed while it was down) and it reconnects.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::{Notify, OnceCell};

use crate::backend::Wakeups;
use crate::error::Result;
use crate::sqlx_support::error::from_sqlx;
use crate::types::LockName;

/// The channel releases are announced on; the payload is the lock name.
const CHANNEL: &str = "distlock_released";
/// The channel election entries and latches reaching 0 are announced on (`sql/notify_changed.sql`).
const CHANGED: &str = "distlock_changed";

/// Watchers of election logs and latches by key (`e:NAME`, `l:NAME`): a notice wakes all of
/// them. Each watcher holds a `watch` receiver, which remembers a change that arrives while it
/// is busy reading, so none is lost between two waits.
#[derive(Default)]
struct Broadcasts {
    by_key: Mutex<HashMap<String, tokio::sync::watch::Sender<()>>>,
}

impl Broadcasts {
    fn subscribe(&self, key: String) -> tokio::sync::watch::Receiver<()> {
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        if by_key.len() > 1024 {
            by_key.retain(|_, tx| tx.receiver_count() > 0);
        }
        by_key
            .entry(key)
            .or_insert_with(|| tokio::sync::watch::channel(()).0)
            .subscribe()
    }

    fn wake(&self, key: &str) {
        let by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = by_key.get(key) {
            tx.send_replace(());
        }
    }

    fn wake_all(&self) {
        let by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        for tx in by_key.values() {
            tx.send_replace(());
        }
    }
}

/// Waiters by lock name. A notice wakes one waiter of the name on this client (the one that
/// will try next), not all of them: one release makes one new holder, and waking every waiter
/// would have them all queue on the row lock to learn that. If the woken waiter loses the race
/// to another client, the next release wakes the next one; if it gave up meanwhile, the others
/// still wake at the latest when the lease they were told of ends.
#[derive(Default)]
struct Waiters {
    by_name: Mutex<HashMap<String, Weak<Notify>>>,
}

impl Waiters {
    fn subscribe(&self, name: &LockName) -> Arc<Notify> {
        let mut by_name = self.by_name.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = by_name.get(name.as_str()).and_then(Weak::upgrade) {
            return n;
        }
        if by_name.len() > 1024 {
            by_name.retain(|_, n| n.strong_count() > 0);
        }
        let n = Arc::new(Notify::new());
        by_name.insert(name.as_str().to_string(), Arc::downgrade(&n));
        n
    }

    fn wake(&self, name: &str) {
        let by_name = self.by_name.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = by_name.get(name).and_then(Weak::upgrade) {
            n.notify_one();
        }
    }

    /// Notices may have been missed: every waiter tries again.
    fn wake_all(&self) {
        let mut by_name = self.by_name.lock().unwrap_or_else(|p| p.into_inner());
        by_name.retain(|_, n| n.strong_count() > 0);
        for n in by_name.values().filter_map(Weak::upgrade) {
            n.notify_waiters();
            n.notify_one();
        }
    }
}

/// The client's listening connection and its waiters.
pub(super) struct Releases {
    pool: PgPool,
    waiters: Arc<Waiters>,
    broadcasts: Arc<Broadcasts>,
    listening: OnceCell<tokio::task::AbortHandle>,
}

impl Releases {
    pub(super) fn new(pool: PgPool) -> Self {
        Releases {
            pool,
            waiters: Arc::default(),
            broadcasts: Arc::default(),
            listening: OnceCell::new(),
        }
    }

    /// Notices for `name`. Returns once the `LISTEN` is in effect, so a release committed after
    /// this call is seen.
    pub(super) async fn watch(&self, name: &LockName) -> Result<Wakeups> {
        self.listen().await?;
        let notify = self.waiters.subscribe(name);
        Ok(Box::pin(futures_util::stream::unfold(
            notify,
            |notify| async move {
                notify.notified().await;
                Some(((), notify))
            },
        )))
    }

    /// Notices for the election or latch `key` (`e:NAME`, `l:NAME`), to every watcher. Returns
    /// once the `LISTEN` is in effect.
    pub(super) async fn watch_changes(&self, key: String) -> Result<Wakeups> {
        self.listen().await?;
        let rx = self.broadcasts.subscribe(key);
        Ok(Box::pin(futures_util::stream::unfold(
            rx,
            |mut rx| async move {
                rx.changed().await.ok()?;
                Some(((), rx))
            },
        )))
    }

    /// Starts the listening connection once.
    async fn listen(&self) -> Result<()> {
        self.listening
            .get_or_try_init(|| async {
                let mut listener = PgListener::connect_with(&self.pool)
                    .await
                    .map_err(|e| from_sqlx(super::NAME, "opening the listening connection", e))?;
                listener
                    .listen_all([CHANNEL, CHANGED])
                    .await
                    .map_err(|e| from_sqlx(super::NAME, "LISTEN", e))?;
                let task = tokio::spawn(listen(
                    listener,
                    Arc::downgrade(&self.waiters),
                    Arc::downgrade(&self.broadcasts),
                ));
                Ok(task.abort_handle())
            })
            .await?;
        Ok(())
    }
}

impl Drop for Releases {
    fn drop(&mut self) {
        if let Some(task) = self.listening.get() {
            task.abort();
        }
    }
}

async fn listen(mut listener: PgListener, waiters: Weak<Waiters>, broadcasts: Weak<Broadcasts>) {
    let mut pause = Duration::from_millis(50);
    loop {
        let received = listener.try_recv().await;
        let (Some(waiters), Some(broadcasts)) = (waiters.upgrade(), broadcasts.upgrade()) else {
            return;
        };
        match received {
            Ok(Some(notice)) if notice.channel() == CHANGED => {
                broadcasts.wake(notice.payload());
                pause = Duration::from_millis(50);
            }
            Ok(Some(notice)) => {
                waiters.wake(notice.payload());
                pause = Duration::from_millis(50);
            }
            // The connection broke and was re-established: notices in between are lost.
            Ok(None) => {
                waiters.wake_all();
                broadcasts.wake_all();
            }
            Err(e) => {
                tracing::debug!("the listening connection failed, retrying: {e}");
                waiters.wake_all();
                broadcasts.wake_all();
                drop((waiters, broadcasts));
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    }
}
