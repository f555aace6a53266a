//! Behaviour written once for every backend: how a waiter waits ([`wait`]), how a held lease is
//! kept and how its loss is signalled ([`lease`]), and how reentrant holders share one holding
//! ([`reentrancy`]). Backends only supply the atomic steps of [`crate::backend::Backend`]; the
//! user API (`Client`, `Lock`, `Guard`) wraps the [`Engine`] and the holdings it hands out.

pub(crate) mod changes;
pub(crate) mod deadline;
pub(crate) mod lease;
pub(crate) mod reentrancy;
mod release_thread;
pub(crate) mod renewals;
pub(crate) mod wait;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::backend::{Backend, LeaseModel, LockRequest};
use crate::error::Result;
use lease::HeldLease;
use reentrancy::LeaseTable;
use renewals::Renewals;
use wait::LocalWakeups;

/// One client's machinery: the store, the holdings it has, and the in-process wake-ups.
pub(crate) struct Engine {
    pub(crate) backend: Arc<dyn Backend>,
    leases: LeaseTable,
    /// The watchdog: renews every holding of this client that wants renewal.
    renewals: Arc<Renewals>,
    local: LocalWakeups,
    /// Where work queued outside a runtime (a guard dropped by a plain thread) runs.
    runtime: Option<tokio::runtime::Handle>,
    /// Releases and leaves still running in the background.
    background: Arc<Background>,
    /// Set when the application's last [`crate::Client`] handle is gone (see
    /// [`Engine::last_client_dropped`]): work queued after that has nobody to wait for it.
    abandoned: AtomicBool,
    /// How long the end of the last client waits for background work (the backend's response
    /// timeout: a release that takes longer has failed anyway, and its lease frees the lock).
    exit_wait: Duration,
    /// Opens another handle on the same store, for the release thread ([`release_thread`]);
    /// `None` for a backend built by hand, whose dropped guards release on the caller's runtime.
    reopen: Option<Reopen>,
    /// That handle, opened on the release thread by the first release sent there.
    twin: tokio::sync::OnceCell<Arc<dyn Backend>>,
    /// Releases running on the release thread.
    aside: Arc<Background>,
    /// Background releases that the release thread does if their runtime drops them unrun
    /// ([`ReleaseElsewhere`]): nothing to warn about when a current-thread runtime cannot wait.
    armed: std::sync::atomic::AtomicUsize,
}

/// Opens another handle on a client's store (the same URL and options), run on the release
/// thread so that its connections belong to the runtime there.
pub(crate) type Reopen = Arc<
    dyn Fn()
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Arc<dyn Backend>>> + Send>>
        + Send
        + Sync,
>;

/// Counts background tasks, so that [`Engine::flush`] (awaiting) and
/// [`Engine::wait_background`] (blocking) can wait for them.
#[derive(Default)]
struct Background {
    running: Mutex<usize>,
    idle: Notify,
    idle_blocking: Condvar,
}

impl Background {
    fn running(&self) -> std::sync::MutexGuard<'_, usize> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks the calling thread until `done(count)`, checked under the count's lock, or until
    /// `within` has passed (false then). It looks again at least every `recheck`, for a `done`
    /// that turns true without this count changing.
    fn wait_blocking(
        &self,
        within: Duration,
        recheck: Duration,
        done: impl Fn(usize) -> bool,
    ) -> bool {
        let deadline = std::time::Instant::now() + within;
        let mut running = self.running();
        while !done(*running) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            running = self
                .idle_blocking
                .wait_timeout(running, left.min(recheck))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }
}

/// The longest a dropped client waits for its background releases when its backend gave no
/// response timeout.
pub(crate) const DEFAULT_EXIT_WAIT: Duration = Duration::from_secs(10);

impl Engine {
    pub(crate) fn new(
        backend: Arc<dyn Backend>,
        exit_wait: Duration,
        reopen: Option<Reopen>,
    ) -> Self {
        let runtime = tokio::runtime::Handle::try_current().ok();
        Engine {
            reopen,
            twin: tokio::sync::OnceCell::new(),
            aside: Arc::default(),
            armed: std::sync::atomic::AtomicUsize::new(0),
            renewals: Renewals::new(backend.clone(), runtime.clone()),
            backend,
            leases: LeaseTable::default(),
            local: LocalWakeups::default(),
            runtime,
            background: Arc::default(),
            abandoned: AtomicBool::new(false),
            exit_wait,
        }
    }

    /// The application dropped its last [`crate::Client`] handle: most often because `main` is
    /// returning (by a `?` as well), and the runtime stops next, dropping every task it has — the
    /// releases that dropped guards queued among them, which would leave their locks held for
    /// the whole lease. So this waits, blocking, until the background work queued so far has
    /// reached the store (at most [`exit_wait`](Engine::exit_wait)); work queued later (a guard
    /// that outlives its client) is waited for by whoever queues it.
    pub(crate) fn last_client_dropped(&self) {
        self.abandoned.store(true, Ordering::Release);
        self.wait_aside();
        self.wait_background(|running| running == 0);
    }

    /// Blocks the calling thread until the releases sent to the release thread so far have
    /// finished, at most `exit_wait`. Safe on any runtime: that thread never needs this one.
    fn wait_aside(&self) {
        if *self.aside.running() == 0 {
            return;
        }
        let wait = || {
            // The release thread's count changes whenever one finishes: no recheck needed.
            if !self
                .aside
                .wait_blocking(self.exit_wait, Duration::MAX, |running| running == 0)
            {
                self.warn_releases_unfinished();
            }
        };
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::CurrentThread) | Err(_) => wait(),
            // A worker of a multi-thread runtime hands its other tasks on meanwhile.
            Ok(_) => tokio::task::block_in_place(wait),
        }
    }

    /// Blocks the calling thread until `done(background count)` (checked under that count's
    /// lock), at most `exit_wait`. The tasks it waits for run on the runtime's other threads: on
    /// a worker of a multi-thread runtime the worker's other tasks move elsewhere meanwhile
    /// (`block_in_place`). A current-thread runtime runs them only on this very thread, so there
    /// it cannot wait: it says so, and the leases free those locks.
    fn wait_background(&self, done: impl Fn(usize) -> bool) {
        if done(*self.background.running()) {
            return;
        }
        let Some(handle) = tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.runtime.clone())
        else {
            return;
        };
        // A runtime that is shutting down (this drop may be part of it) never runs the work:
        // a task spawned now is cancelled before it runs, and that ends the wait.
        let probe_ran = Arc::new(AtomicBool::new(false));
        let probe = handle.spawn({
            let ran = probe_ran.clone();
            async move { ran.store(true, Ordering::Release) }
        });
        let shutting_down = || probe.is_finished() && !probe_ran.load(Ordering::Acquire);
        let wait = || {
            // A runtime's shutdown and a task's end do not touch the count: look every 50 ms.
            let finished = |running| done(running) || shutting_down();
            if !self
                .background
                .wait_blocking(self.exit_wait, Duration::from_millis(50), finished)
            {
                self.warn_releases_unfinished();
            }
        };
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            // The releases the release thread takes over if the runtime stops are no loss.
            Ok(tokio::runtime::RuntimeFlavor::CurrentThread)
                if *self.background.running() <= self.armed.load(Ordering::Acquire) => {}
            Ok(tokio::runtime::RuntimeFlavor::CurrentThread) => tracing::warn!(
                backend = self.backend.name(),
                "the last client was dropped on a current-thread runtime with releases still \
                 queued: they run only if the runtime goes on (await Client::shutdown before \
                 returning, or use Lock::run); otherwise their leases free the locks"
            ),
            Ok(_) => tokio::task::block_in_place(wait),
            Err(_) => wait(),
        }
    }

    fn warn_releases_unfinished(&self) {
        tracing::warn!(
            backend = self.backend.name(),
            "releases of dropped guards did not finish within {:?}; their leases will free the \
             locks",
            self.exit_wait
        );
    }

    /// Waits until every release and leave queued in the background so far (dropped guards,
    /// cancelled or timed-out acquisitions) has finished.
    pub(crate) async fn flush(&self) {
        for background in [&self.background, &self.aside] {
            loop {
                let idle = background.idle.notified();
                tokio::pin!(idle);
                idle.as_mut().enable();
                if *background.running() == 0 {
                    break;
                }
                idle.await;
            }
        }
    }

    /// Adds a hold to `lease` if it is still this owner's holding (asks the store, which
    /// restarts the lease). `Ok(false)` if the holding is gone; nothing is taken then.
    pub(crate) async fn reenter(&self, lease: &Arc<HeldLease>) -> Result<bool> {
        reentrancy::reenter(&*self.backend, lease).await
    }

    /// Releases one hold of `lease`; `Ok(true)` if the holding was still ours.
    pub(crate) async fn release(&self, lease: &Arc<HeldLease>) -> Result<bool> {
        self.release_through(&*self.backend, lease).await
    }

    /// Releases the hold of a dropped guard, in the background on the caller's runtime. Where
    /// that runtime may stop before it runs the release — a current-thread one (or none), which
    /// stops as soon as its `block_on` returns, as at the end of a `#[tokio::test]`, and drops
    /// the task unrun — the task carries a [`ReleaseElsewhere`]: dropped unrun, it has the
    /// release thread do the release and waits for it. A multi-thread runtime runs the task as
    /// before, with nothing added.
    pub(crate) fn release_dropped(self: &Arc<Self>, lease: Arc<HeldLease>) {
        let fallback = self
            .runtime_may_stop_first()
            .then(|| ReleaseElsewhere::arm(self.clone(), lease.clone()));
        let engine = self.clone();
        // The task keeps the lease (and its watchdog) alive until the release is done.
        self.spawn_detached(async move {
            // Running: this runtime does the release, through this client's own connections;
            // cut short by the runtime's end, the fallback finishes it.
            let mut fallback = fallback;
            if let Some(fallback) = fallback.as_mut() {
                fallback.started = true;
            }
            if let Err(e) = engine.release(&lease).await {
                tracing::warn!(lock = %lease.req.name, "background release failed: {e}");
            }
            if let Some(fallback) = fallback {
                fallback.disarm();
            }
        });
    }

    /// Whether a dropped guard's release needs the release thread as a fallback: the caller's
    /// runtime is a current-thread one (or there is none), and the release thread can do it —
    /// the client has a twin (it was not built from a backend by hand) and the store's holdings
    /// are leases (a session belongs to the caller's connection, which a twin does not have;
    /// sessions end with it or with their expiry).
    fn runtime_may_stop_first(&self) -> bool {
        let flavour = match tokio::runtime::Handle::try_current() {
            Ok(handle) => Some(handle.runtime_flavor()),
            Err(_) => self.runtime.as_ref().map(|h| h.runtime_flavor()),
        };
        !matches!(flavour, Some(f) if f != tokio::runtime::RuntimeFlavor::CurrentThread)
            && self.reopen.is_some()
            && matches!(
                self.backend.capabilities().lease,
                LeaseModel::PerLock { .. }
            )
    }

    /// Releases `lease` on the release thread, through the twin, and waits for it (at most
    /// `exit_wait`): called as the caller's runtime drops the release it never ran, most often
    /// while it shuts down right before the program or test ends. The wait never needs the
    /// caller's runtime: the release thread has its own, and the twin its own connections.
    ///
    /// `store_step_only`: the release had begun on the caller's runtime and this guard's hold is
    /// already counted off (no guard holds the lease): only the store's step is left, freeing
    /// the holding by its token (which frees nothing if it had already been freed).
    fn release_on_thread(self: &Arc<Self>, lease: Arc<HeldLease>, store_step_only: bool) {
        let Some(reopen) = self.reopen.clone() else {
            return;
        };
        *self.aside.running() += 1;
        let done = Finished(self.aside.clone());
        let engine = self.clone();
        let job: release_thread::Job = Box::pin(async move {
            let outcome = match engine.twin.get_or_try_init(|| reopen()).await {
                Ok(twin) if store_step_only => twin
                    .release(&lease.req, Some(lease.token))
                    .await
                    .inspect(|&freed| {
                        if freed {
                            engine.local.released(&lease.req.name);
                        }
                    }),
                Ok(twin) => engine.release_through(&**twin, &lease).await,
                Err(e) => Err(e),
            };
            if let Err(e) = outcome {
                tracing::warn!(lock = %lease.req.name, "background release failed: {e}");
            }
            drop(done);
        });
        if release_thread::run(job).is_err() {
            // Dropping the unsent job counts it finished; the lease frees the lock.
            return;
        }
        self.wait_aside();
    }

    /// On a current-thread runtime, opens the twin on the release thread now, in the
    /// background, so that the first dropped guard's release does not wait for a connection
    /// (and the tables' check) first: hundreds of milliseconds on a busy PostgreSQL.
    pub(crate) fn open_twin_early(self: &Arc<Self>) {
        let on_current_thread = matches!(
            self.runtime.as_ref().map(|h| h.runtime_flavor()),
            Some(tokio::runtime::RuntimeFlavor::CurrentThread)
        );
        let Some(reopen) = self.reopen.clone() else {
            return;
        };
        if !on_current_thread
            || !matches!(
                self.backend.capabilities().lease,
                LeaseModel::PerLock { .. }
            )
        {
            return;
        }
        // Not counted as background work: nobody waits for a twin no release needs, and a
        // client dropped meanwhile is not kept alive for it.
        let engine = Arc::downgrade(self);
        let _ = release_thread::run(Box::pin(async move {
            let Some(engine) = engine.upgrade() else {
                return;
            };
            if let Err(e) = engine.twin.get_or_try_init(|| reopen()).await {
                tracing::debug!(
                    backend = engine.backend.name(),
                    "the release thread's connection is not open yet: {e}"
                );
            }
        }));
    }

    /// [`release`](Engine::release) through `backend`: this client's, or its twin.
    async fn release_through(&self, backend: &dyn Backend, lease: &Arc<HeldLease>) -> Result<bool> {
        use tracing::Instrument;
        let span = tracing::debug_span!(
            "distlock.release",
            backend = self.backend.name(),
            lock = %lease.req.name,
            token = lease.token.get(),
        );
        let outcome = reentrancy::release(backend, lease).instrument(span).await?;
        if outcome.freed {
            self.local.released(&lease.req.name);
        }
        Ok(outcome.held)
    }

    /// Frees whatever holding `req.owner` has of the lock, without a guard.
    pub(crate) async fn release_by_owner(&self, req: &LockRequest) -> Result<bool> {
        let freed = self.backend.release(req, None).await?;
        if freed {
            // This client's guards of that holding learn it now, not at their next renewal.
            if let Some(lease) = self.leases.holding(req) {
                lease.mark_lost("its owner token released it (Lock::release)");
            }
            self.local.released(&req.name);
        }
        Ok(freed)
    }

    /// Runs `fut` in the background, tracked for [`flush`](Engine::flush): on the current
    /// runtime, or on the one the engine was made on when called outside one (a guard dropped
    /// by a plain thread). Without either, the work is skipped: the lease covers it.
    pub(crate) fn spawn_detached<F>(&self, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let Some(handle) = tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.runtime.clone())
        else {
            return;
        };
        *self.background.running() += 1;
        let done = Finished(self.background.clone());
        let task = handle.spawn(async move {
            fut.await;
            drop(done);
        });
        if self.abandoned.load(Ordering::Acquire) {
            // No client is left to wait for this at the end: wait for it here.
            self.wait_background(|_| task.is_finished());
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // The twin's connections belong to the release thread's runtime: closed there.
        if let Some(twin) = self.twin.take() {
            let _ = release_thread::run(Box::pin(async move { drop(twin) }));
        }
    }
}

/// Carried by the task of a dropped guard's release on a runtime that may stop first
/// ([`Engine::release_dropped`]): disarmed when the task runs; dropped armed (the runtime
/// dropped the task unrun, shutting down), it has the release thread do the release instead.
struct ReleaseElsewhere {
    engine: Arc<Engine>,
    lease: Option<Arc<HeldLease>>,
    /// The task began the release: dropped now, only what is left of it is done.
    started: bool,
}

impl ReleaseElsewhere {
    fn arm(engine: Arc<Engine>, lease: Arc<HeldLease>) -> Self {
        engine.armed.fetch_add(1, Ordering::AcqRel);
        ReleaseElsewhere {
            engine,
            lease: Some(lease),
            started: false,
        }
    }

    fn disarm(mut self) {
        if self.lease.take().is_some() {
            self.engine.armed.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for ReleaseElsewhere {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.engine.armed.fetch_sub(1, Ordering::AcqRel);
            if !self.started {
                self.engine.release_on_thread(lease, false);
            } else if lease.holds() == 0 {
                // Cut short at the store's step (the long wait of a release): that step again.
                self.engine.release_on_thread(lease, true);
            }
            // Cut short before its hold was counted off, while other guards share the holding:
            // which of the two is unknown here, and the lease frees the lock.
        }
    }
}

/// A future run in the caller's task, or — if the caller drops it unfinished — run to its end in
/// the background ([`Engine::spawn_detached`], so [`Engine::flush`] waits for it): for steps the
/// store must see whole whatever the caller does, such as a release, which a dropped guard also
/// finishes in the background.
pub(crate) struct Finishing<T: Send + 'static> {
    engine: Arc<Engine>,
    step: Option<std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>>,
}

impl<T: Send + 'static> Finishing<T> {
    pub(crate) fn new(
        engine: Arc<Engine>,
        step: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Self {
        Finishing {
            engine,
            step: Some(Box::pin(step)),
        }
    }
}

impl<T: Send + 'static> std::future::Future for Finishing<T> {
    type Output = T;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<T> {
        let Some(step) = self.step.as_mut() else {
            panic!("Finishing polled after it finished");
        };
        let out = std::task::ready!(step.as_mut().poll(cx));
        self.step = None;
        std::task::Poll::Ready(out)
    }
}

impl<T: Send + 'static> Drop for Finishing<T> {
    fn drop(&mut self) {
        if let Some(step) = self.step.take() {
            self.engine.spawn_detached(async move {
                step.await;
            });
        }
    }
}

/// Counts a background task as finished when dropped: also when the task is cancelled.
struct Finished(Arc<Background>);

impl Drop for Finished {
    fn drop(&mut self) {
        let mut running = self.0.running();
        *running -= 1;
        drop(running);
        // Every finish wakes the blocking waiters, who also wait for single tasks.
        self.0.idle_blocking.notify_all();
        if *self.0.running() == 0 {
            self.0.idle.notify_waiters();
        }
    }
}
