//! A held lease: the watchdog that renews it and the signal that says it is gone.
//!
//! The watchdog renews every lease/3 (for lease-based stores; session-based ones, whose
//! capabilities say they do not renew, only report the session's end). It counts the lease from the moment the request that
//! (re)started it was *sent*, so its idea of "expired" is never later than the store's. It stops
//! and fires the lost signal when the store says the lock is no longer ours, when renewal kept
//! failing until the lease ran out, or when a session-based store ends the session.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::{Backend, LockRequest, Signal};
use crate::error::{Error, ErrorKind};
use crate::types::{FencingToken, show_duration};

/// One holding of one lock by one owner, shared by all reentrant guards of that owner.
pub(crate) struct HeldLease {
    pub(crate) req: LockRequest,
    pub(crate) token: FencingToken,
    lost: watch::Receiver<Option<Arc<str>>>,
    watchdog: tokio::task::AbortHandle,
    on_drop: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl HeldLease {
    /// Starts the watchdog for a lock acquired by a request sent at `sent`.
    pub(crate) fn start(
        backend: Arc<dyn Backend>,
        req: LockRequest,
        token: FencingToken,
        sent: Instant,
        renew: bool,
        session_lost: Option<Signal>,
    ) -> Self {
        let (tx, rx) = watch::channel(None);
        let watchdog = tokio::spawn(watch_lease(
            backend,
            req.clone(),
            sent,
            renew,
            session_lost,
            tx,
        ))
        .abort_handle();
        HeldLease {
            req,
            token,
            lost: rx,
            watchdog,
            on_drop: None,
        }
    }

    pub(crate) fn set_on_drop(&mut self, f: impl FnOnce() + Send + Sync + 'static) {
        self.on_drop = Some(Box::new(f));
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.borrow().is_some()
    }

    /// Resolves with a [`ErrorKind::LeaseLost`] error once the lease is gone.
    pub(crate) fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        let mut rx = self.lost.clone();
        let name = self.req.name.clone();
        async move {
            let why = match rx.wait_for(|v| v.is_some()).await {
                Ok(v) => v.as_ref().map(|s| s.to_string()).unwrap_or_default(),
                // The watchdog is gone without a verdict: only when the guard was released.
                Err(_) => "the lock was released".to_string(),
            };
            Error::new(ErrorKind::LeaseLost, format!("lock {name:?}: {why}"))
        }
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        self.watchdog.abort();
        if let Some(f) = self.on_drop.take() {
            f();
        }
    }
}

async fn watch_lease(
    backend: Arc<dyn Backend>,
    req: LockRequest,
    sent: Instant,
    renew: bool,
    session_lost: Option<Signal>,
    lost: watch::Sender<Option<Arc<str>>>,
) {
    let session = async {
        match session_lost {
            Some(signal) => signal.await,
            None => std::future::pending().await,
        }
    };
    // Session-based stores keep the lock for as long as the session lives: nothing to renew,
    // and no lease to run out; only the session's end is a loss.
    let renewal = async {
        if backend.capabilities().renews {
            keep_renewed(&*backend, &req, sent, renew).await
        } else {
            std::future::pending().await
        }
    };
    let why = tokio::select! {
        why = renewal => why,
        () = session => format!("the {} session holding the lock ended", backend.name()),
    };
    tracing::warn!(lock = %req.name, backend = backend.name(), "lease lost: {why}");
    let _ = lost.send(Some(why.into()));
}

/// Renews until renewal is impossible; returns why it stopped.
async fn keep_renewed(
    backend: &dyn Backend,
    req: &LockRequest,
    mut confirmed: Instant,
    renew: bool,
) -> String {
    let lease = req.lease.duration();
    if !renew {
        tokio::time::sleep_until(confirmed + lease).await;
        return format!(
            "its {} lease ended (renewal is off)",
            show_duration(req.lease.duration())
        );
    }
    let period = lease / 3;
    let mut next = confirmed + period;
    loop {
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        let expires = confirmed + lease;
        // Past the lease (the process was paused, say), still ask: the store may answer that
        // nobody took the lock meanwhile. Give the answer at least a period to arrive.
        let answer_by = expires.max(sent + period);
        match tokio::time::timeout_at(answer_by, backend.extend(req)).await {
            Ok(Ok(true)) => {
                confirmed = sent;
                next = sent + period;
            }
            Ok(Ok(false)) => return "the store no longer lists this holder as owner".into(),
            Ok(Err(e)) if Instant::now() < expires => {
                tracing::debug!(lock = %req.name, "renewal failed, retrying: {e}");
                next = Instant::now() + (period / 4).max(Duration::from_millis(5));
            }
            Ok(Err(e)) => return format!("renewal failed until the lease ended: {e}"),
            Err(_) => return "renewal got no answer before the lease ended".into(),
        }
    }
}
