//! Waking waiters: one listening connection per client (`LISTEN distlock_released`), shared by
//! every waiter of every lock. The release statement sends `pg_notify('distlock_released', name)`
//! in its own transaction, so the notice arrives only once the lock is really free.
//!
//! The listener starts with the first waiter and stays. When its connection breaks, every waiter
//! is woken (notices may have been missed while it was down) and it reconnects.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::{OnceCell, watch};

use crate::backend::Wakeups;
use crate::backends::sqlx_error::from_sqlx;
use crate::error::Result;
use crate::types::LockName;

/// The channel releases are announced on; the payload is the lock name.
const CHANNEL: &str = "distlock_released";

/// Waiters by lock name: each notice bumps the name's counter, which wakes its receivers.
#[derive(Default)]
struct Waiters {
    by_name: Mutex<HashMap<String, watch::Sender<u64>>>,
}

impl Waiters {
    fn subscribe(&self, name: &LockName) -> watch::Receiver<u64> {
        let mut by_name = self.by_name.lock().unwrap_or_else(|p| p.into_inner());
        if by_name.len() > 1024 {
            by_name.retain(|_, tx| tx.receiver_count() > 0);
        }
        by_name
            .entry(name.as_str().to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    fn wake(&self, name: &str) {
        let mut by_name = self.by_name.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = by_name.get(name) {
            if tx.receiver_count() == 0 {
                by_name.remove(name);
            } else {
                tx.send_modify(|n| *n += 1);
            }
        }
    }

    fn wake_all(&self) {
        let mut by_name = self.by_name.lock().unwrap_or_else(|p| p.into_inner());
        by_name.retain(|_, tx| tx.receiver_count() > 0);
        for tx in by_name.values() {
            tx.send_modify(|n| *n += 1);
        }
    }
}

/// The client's listening connection and its waiters.
pub(super) struct Releases {
    pool: PgPool,
    waiters: Arc<Waiters>,
    listening: OnceCell<tokio::task::AbortHandle>,
}

impl Releases {
    pub(super) fn new(pool: PgPool) -> Self {
        Releases {
            pool,
            waiters: Arc::default(),
            listening: OnceCell::new(),
        }
    }

    /// Notices for `name`. Returns once the `LISTEN` is in effect, so a release committed after
    /// this call is seen.
    pub(super) async fn watch(&self, name: &LockName) -> Result<Wakeups> {
        self.listening
            .get_or_try_init(|| async {
                let mut listener = PgListener::connect_with(&self.pool)
                    .await
                    .map_err(|e| from_sqlx(super::NAME, "opening the listening connection", e))?;
                listener
                    .listen(CHANNEL)
                    .await
                    .map_err(|e| from_sqlx(super::NAME, "LISTEN", e))?;
                let task = tokio::spawn(listen(listener, Arc::downgrade(&self.waiters)));
                Ok(task.abort_handle())
            })
            .await?;
        let rx = self.waiters.subscribe(name);
        Ok(Box::pin(futures_util::stream::unfold(
            rx,
            |mut rx| async move {
                rx.changed().await.ok()?;
                Some(((), rx))
            },
        )))
    }
}

impl Drop for Releases {
    fn drop(&mut self) {
        if let Some(task) = self.listening.get() {
            task.abort();
        }
    }
}

async fn listen(mut listener: PgListener, waiters: Weak<Waiters>) {
    let mut pause = Duration::from_millis(50);
    loop {
        let received = listener.try_recv().await;
        let Some(waiters) = waiters.upgrade() else {
            return;
        };
        match received {
            Ok(Some(notice)) => {
                waiters.wake(notice.payload());
                pause = Duration::from_millis(50);
            }
            // The connection broke and was re-established: notices in between are lost.
            Ok(None) => waiters.wake_all(),
            Err(e) => {
                tracing::debug!("the listening connection failed, retrying: {e}");
                waiters.wake_all();
                drop(waiters);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    }
}
