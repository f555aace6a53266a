//! The process's release thread: a runtime of distlock's own, on a thread of its own, that
//! finishes the releases of guards dropped where the caller's runtime may never run them.
//!
//! A current-thread runtime runs its tasks only while its one thread is inside `block_on`. A
//! guard dropped as a `#[tokio::test]` returns, or as `main` returns under
//! `flavor = "current_thread"`, queues its release there just before the runtime stops and
//! drops every task it has: the lock stayed held for its whole lease. And the dropping thread
//! cannot wait for that runtime (it is the thread that would have to run it). So such a
//! release, dropped unrun (or cut short) by its runtime, is sent here instead
//! (`ReleaseElsewhere` in [`super`]), and the runtime's shutdown waits for it: this thread is
//! always running, and waiting for it never waits for the caller's own runtime.
//!
//! Tokio I/O belongs to the runtime that opened it: the caller's store connections stop with
//! the caller's runtime. Releases here go through a second handle on the store opened on this
//! thread ([`super::Engine`]'s twin), never through the caller's connections.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;

use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

/// One piece of work for the release thread.
pub(crate) type Job = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The thread's queue, started at the first job; `None` if it could not be started.
static QUEUE: OnceLock<Option<UnboundedSender<Job>>> = OnceLock::new();

/// Runs `job` on the release thread, or hands it back if there is none (the thread could not be
/// started: the caller falls back to its own runtime).
pub(crate) fn run(job: Job) -> Result<(), Job> {
    match QUEUE.get_or_init(start) {
        Some(queue) => queue.send(job).map_err(|unsent| unsent.0),
        None => Err(job),
    }
}

/// Starts the thread: it runs each job as a task of its runtime, side by side, for the rest of
/// the process (the queue's sender is never dropped; the thread does not keep the process alive,
/// the end of the last client waits for the work it needs instead).
fn start() -> Option<UnboundedSender<Job>> {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::warn!("distlock could not start its release thread's runtime: {e}");
            return None;
        }
    };
    let (queue, mut jobs) = unbounded_channel::<Job>();
    let started = std::thread::Builder::new()
        .name("distlock-release".into())
        .spawn(move || {
            runtime.block_on(async move {
                while let Some(job) = jobs.recv().await {
                    tokio::spawn(job);
                }
            })
        });
    match started {
        Ok(_) => Some(queue),
        Err(e) => {
            tracing::warn!("distlock could not start its release thread: {e}");
            None
        }
    }
}
