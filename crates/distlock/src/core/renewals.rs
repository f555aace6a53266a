//! The watchdog: one queue and one task per client renew every holding that wants renewal,
//! instead of a task and a timer per guard. Holdings are queued by when their next renewal is
//! due; the task sleeps until the earliest, runs the due renewals side by side (a slow store
//! delays no other holding's renewal), and queues each again for the time its step names.
//!
//! A holding leaves the queue when its last guard goes or it is dropped ([`Renewals::cancel`]),
//! so the queue holds only live holdings; one lost meanwhile is skipped when it comes up.
//! Queueing costs a lock and, only when the new entry is due before the task would look again by
//! itself, a wake-up of the task (a client taking lock after lock queues each new lease behind
//! the ones before, and wakes nothing).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::core::lease::{HeldLease, Renewed, renew_once};

/// How long the task keeps looking by itself after the queue empties (see
/// [`Renewals::next_look`]).
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// Where a renewal sits in the queue: when it is due, ties broken by queueing order.
pub(crate) type QueueKey = (Instant, u64);

#[derive(Default)]
struct Queue {
    due: BTreeMap<QueueKey, Weak<HeldLease>>,
    next_seq: u64,
    /// When the task will look at the queue next by itself (`None`: only when told). A renewal
    /// due no earlier needs no wake-up: the task will find it then.
    task_wakes_at: Option<Instant>,
}

/// The renewals of one client's holdings.
pub(crate) struct Renewals {
    backend: Arc<dyn Backend>,
    queue: Mutex<Queue>,
    /// Something was queued before everything else: the task must look again.
    earlier: Arc<Notify>,
    /// Where the task runs if queueing happens outside a runtime.
    runtime: Option<tokio::runtime::Handle>,
    /// The task, once something was queued (`None`: there was no runtime to run it on).
    task: OnceLock<Option<tokio::task::AbortHandle>>,
}

impl Renewals {
    pub(crate) fn new(
        backend: Arc<dyn Backend>,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Arc<Self> {
        Arc::new(Renewals {
            backend,
            queue: Mutex::default(),
            earlier: Arc::new(Notify::new()),
            runtime,
            task: OnceLock::new(),
        })
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Renews `lease` at `at` (and from then on as its renewals say).
    pub(crate) fn schedule(self: &Arc<Self>, at: Instant, lease: &Arc<HeldLease>) {
        self.start();
        let (key, first) = {
            let mut queue = self.queue();
            // Only a renewal due before the task's own wake-up needs it woken: queueing the
            // next lease of a busy client (always later than the ones queued) costs no wake-up.
            let first = queue.task_wakes_at.is_none_or(|wakes| at < wakes);
            if first {
                queue.task_wakes_at = Some(at);
            }
            let key = (at, queue.next_seq);
            queue.next_seq += 1;
            queue.due.insert(key, Arc::downgrade(lease));
            (key, first)
        };
        lease.set_renewal(key);
        if first {
            self.earlier.notify_one();
        }
    }

    /// Takes a queued renewal off the queue.
    pub(crate) fn cancel(&self, key: QueueKey) {
        self.queue().due.remove(&key);
    }

    fn start(self: &Arc<Self>) {
        self.task.get_or_init(|| {
            let handle = tokio::runtime::Handle::try_current()
                .ok()
                .or_else(|| self.runtime.clone());
            // Without a runtime nothing can renew; the leases then run out (and say so).
            let task = run(Arc::downgrade(self), self.earlier.clone());
            handle.map(|h| h.spawn(task).abort_handle())
        });
    }

    /// The due holdings that still want renewal, taken off the queue.
    fn take_due(&self, now: Instant) -> Vec<Arc<HeldLease>> {
        let mut queue = self.queue();
        let mut due = Vec::new();
        while queue.due.first_key_value().is_some_and(|(k, _)| k.0 <= now) {
            if let Some((_, lease)) = queue.due.pop_first()
                && let Some(lease) = lease.upgrade()
                && lease.wants_renewal()
            {
                due.push(lease);
            }
        }
        due
    }

    /// How many renewals are queued.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.queue().due.len()
    }

    /// When the task is to look again: at the earliest renewal queued; with none queued, after
    /// [`IDLE_LOOK`] (a client taking lock after lock empties the queue between two holdings,
    /// and would otherwise wake the task for each), or only when told once a whole
    /// [`IDLE_LOOK`] went by with nothing queued. `quiet_since` is what the last look returned:
    /// the queueing count when it found the queue empty.
    fn next_look(&self, now: Instant, quiet_since: Option<u64>) -> (Option<Instant>, Option<u64>) {
        let mut queue = self.queue();
        let (next, quiet) = match queue.due.first_key_value() {
            Some((k, _)) => (Some(k.0), None),
            None if quiet_since == Some(queue.next_seq) => (None, quiet_since),
            None => (Some(now + IDLE_LOOK), Some(queue.next_seq)),
        };
        queue.task_wakes_at = next;
        (next, quiet)
    }
}

impl Drop for Renewals {
    fn drop(&mut self) {
        if let Some(Some(task)) = self.task.get() {
            task.abort();
        }
    }
}

/// The task: while the client lives, renew what is due.
async fn run(renewals: Weak<Renewals>, earlier: Arc<Notify>) {
    let mut running = FuturesUnordered::new();
    let mut quiet_since = None;
    loop {
        let Some(this) = renewals.upgrade() else {
            return;
        };
        let earlier = earlier.notified();
        tokio::pin!(earlier);
        earlier.as_mut().enable();
        for lease in this.take_due(Instant::now()) {
            let backend = this.backend.clone();
            running.push(async move {
                let renewed = renew_once(&*backend, &lease).await;
                (lease, renewed)
            });
        }
        let next;
        (next, quiet_since) = this.next_look(Instant::now(), quiet_since);
        // Not held across the wait: the client may go away meanwhile.
        drop(this);
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => {}
            () = &mut earlier => {}
            Some((lease, renewed)) = running.next(), if !running.is_empty() => {
                if let (Renewed::Next(at), Some(this)) = (renewed, renewals.upgrade())
                    && lease.wants_renewal()
                {
                    this.schedule(at, &lease);
                }
            }
        }
    }
}
