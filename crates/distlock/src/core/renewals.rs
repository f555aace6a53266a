//! The watchdog: one queue and one task per client renew every holding that wants renewal,
//! instead of a task and a timer per guard. Holdings are queued by when their next renewal is
//! due; the task sleeps until the earliest, runs the due renewals side by side (a slow store
//! delays no other holding's renewal), and queues each again for the time its step names.
//!
//! A holding leaves the queue by itself: when it is dropped, released (no hold left) or lost,
//! its entry is skipped when it comes up. Queueing costs a lock and, only when the new entry is
//! due before everything queued, a wake-up of the task.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::core::lease::{HeldLease, Renewed, renew_once};

/// One queued renewal.
struct Due {
    at: Instant,
    /// Ties broken by queueing order.
    seq: u64,
    lease: Weak<HeldLease>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

#[derive(Default)]
struct Queue {
    due: BinaryHeap<Reverse<Due>>,
    next_seq: u64,
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
        let first = {
            let mut queue = self.queue();
            let first = queue.due.peek().is_none_or(|Reverse(d)| at < d.at);
            let seq = queue.next_seq;
            queue.next_seq += 1;
            queue.due.push(Reverse(Due {
                at,
                seq,
                lease: Arc::downgrade(lease),
            }));
            first
        };
        if first {
            self.earlier.notify_one();
        }
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
        while queue.due.peek().is_some_and(|Reverse(d)| d.at <= now) {
            if let Some(Reverse(d)) = queue.due.pop()
                && let Some(lease) = d.lease.upgrade()
                && lease.wants_renewal()
            {
                due.push(lease);
            }
        }
        due
    }

    fn next_due(&self) -> Option<Instant> {
        self.queue().due.peek().map(|Reverse(d)| d.at)
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
        let next = this.next_due();
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
