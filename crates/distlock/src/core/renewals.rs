//! The watchdog: one queue and one task per client renew every holding that wants renewal,
//! instead of a task and a timer per guard. Holdings are queued by when their next renewal is
//! due; the task sleeps until the earliest, runs the due renewals side by side (a slow store
//! delays no other holding's renewal), and queues each again for the time its step names.
//!
//! Where the store renews many holdings in one call ([`Backend::max_batch`] above 1), a round
//! also takes the holdings due within a tenth of their lease after it (renewed that much early,
//! never late), and sends them in batches; renewed together, they stay in step. However the
//! holdings were taken, the renewals of one period (a third of the lease) then fall into at most
//! four such rounds, so a client holding 10,000 locks of one lease renews them in about a
//! hundred calls per period (at most 10,000 / `max_batch` + 4) instead of 10,000.
//!
//! A holding leaves the queue when its last guard goes or it is dropped ([`Renewals::cancel`]),
//! so the queue holds only live holdings; one lost meanwhile is skipped when it comes up.
//! Queueing costs a lock and, only when the new entry is due before the task would look again by
//! itself, a wake-up of the task (a client taking lock after lock queues each new lease behind
//! the ones before, and wakes nothing).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::core::lease::{HeldLease, Renewed, renew_batch, renew_once};

/// How long the task keeps looking by itself after the queue empties (see
/// [`Renewals::next_look`]).
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// A holding due within its lease divided by this after a round is renewed with that round
/// (batching stores only): early enough to share its calls, still most of a period (a third of
/// the lease) after its last renewal.
const JOIN_EARLY_DIVISOR: u32 = 10;

/// Sets a smaller batch than the store's (1: every holding renewed by its own call, as before
/// batching), for measuring what batching saves (`docs/benchmarks.md`).
const BATCH_ENV: &str = "DISTLOCK_RENEW_BATCH";

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
    /// The most renewals one call carries (1: each its own `extend`).
    batch: usize,
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
        let batch = batch_size(
            backend.max_batch(),
            std::env::var(BATCH_ENV).ok().as_deref(),
        );
        Arc::new(Renewals {
            backend,
            batch,
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

    /// The due holdings that still want renewal, taken off the queue; where renewals are
    /// batched and some are due, with them those due within a [`JOIN_EARLY_DIVISOR`]th of their
    /// lease.
    fn take_due(&self, now: Instant) -> Vec<Arc<HeldLease>> {
        let mut queue = self.queue();
        let mut due = Vec::new();
        let mut any_due = false;
        while let Some((key, lease)) = queue.due.first_key_value() {
            if key.0 > now {
                let joins = any_due
                    && self.batch > 1
                    && lease.upgrade().is_none_or(|lease| {
                        key.0 <= now + lease.req.lease.duration() / JOIN_EARLY_DIVISOR
                    });
                if !joins {
                    break;
                }
            }
            any_due = true;
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
        let mut due = this.take_due(Instant::now());
        if this.batch > 1 {
            while !due.is_empty() {
                let batch: Vec<_> = due.drain(..due.len().min(this.batch)).collect();
                let backend = this.backend.clone();
                running.push(
                    async move {
                        match <[_; 1]>::try_from(batch) {
                            // One alone goes as a plain renewal.
                            Ok([lease]) => {
                                let renewed = renew_once(&*backend, &lease).await;
                                vec![(lease, renewed)]
                            }
                            Err(batch) => renew_batch(&*backend, batch).await,
                        }
                    }
                    .boxed(),
                );
            }
        }
        for lease in due {
            let backend = this.backend.clone();
            running.push(
                async move {
                    let renewed = renew_once(&*backend, &lease).await;
                    vec![(lease, renewed)]
                }
                .boxed(),
            );
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
            Some(renewed) = running.next(), if !running.is_empty() => {
                let Some(this) = renewals.upgrade() else {
                    return;
                };
                for (lease, renewed) in renewed {
                    if let Renewed::Next(at) = renewed
                        && lease.wants_renewal()
                    {
                        this.schedule(at, &lease);
                    }
                }
            }
        }
    }
}

/// The renewals one call carries: the store's `max_batch`, or a smaller positive number
/// `BATCH_ENV` sets.
fn batch_size(max_batch: usize, env: Option<&str>) -> usize {
    let max_batch = max_batch.max(1);
    env.and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n >= 1)
        .map_or(max_batch, |n| n.min(max_batch))
}

#[cfg(test)]
mod tests {
    use super::batch_size;

    #[test]
    fn the_env_var_only_lowers_the_batch() {
        assert_eq!(batch_size(100, None), 100);
        assert_eq!(batch_size(100, Some("1")), 1);
        assert_eq!(batch_size(100, Some("500")), 100);
        assert_eq!(batch_size(100, Some("0")), 100);
        assert_eq!(batch_size(100, Some("x")), 100);
        assert_eq!(batch_size(1, Some("50")), 1);
        assert_eq!(batch_size(0, None), 1);
    }
}
