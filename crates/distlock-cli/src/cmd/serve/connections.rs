//! The connections `serve` keeps open, so that slow or idle clients cannot lock others out
//! (issue #32: 1,100 half-sent requests once held every file descriptor, and nothing closed them).
//!
//! * A request whose header has not all come `--header-timeout` after its first byte is closed.
//! * A connection with no request under way for `--idle-timeout` (a new one that sends nothing,
//!   or one kept alive after an answer) is closed.
//! * At most `--max-connections` are open. One more takes the place of the open one that has
//!   waited longest for its request; when every open one is being answered, it waits until one
//!   ends. A request being answered is never closed to make room.
//! * Out of file descriptors (EMFILE), the cap drops to what was open then, less [`FD_RESERVE`].
//!
//! hyper answers the requests; this is what it cannot do. Its `header_read_timeout` runs from
//! when it starts waiting for a request, not from the request's first byte, so it would close an
//! idle keep-alive connection at the header timeout and make `--idle-timeout` moot; and a
//! semaphore can make a new connection wait, not close the one waiting longest to make room.
//! So each connection has a [`Slot`] saying what it does since when, watched by its task.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tower_service::Service;

/// File descriptors kept free when the cap is lowered on EMFILE: the store's connections and
/// files, and the listener's next accept.
const FD_RESERVE: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Doing {
    /// Waiting for a request, none of whose bytes have come.
    Idle,
    /// A request's first bytes have come, not its whole header.
    Reading,
    /// A request is being answered.
    Answering,
    /// Chosen to make room; its task closes it.
    Closing,
}

/// What a connection does and since when, changed in one step (so a connection is either chosen
/// to close or starts its answer, not both); its task watches it.
struct Slot(watch::Sender<(Doing, Instant)>);

impl Slot {
    /// Moves to `to`, stamped now, if `from` holds for what it does now; false if not.
    fn shift(&self, from: impl Fn(Doing, Instant) -> bool, to: Doing) -> bool {
        self.0.send_if_modified(|state| {
            let moved = from(state.0, state.1);
            if moved {
                *state = (to, Instant::now());
            }
            moved
        })
    }

    fn waiting(&self) -> bool {
        matches!(self.0.borrow().0, Doing::Idle | Doing::Reading)
    }
}

/// Every open connection, and the cap on them.
pub(super) struct Connections {
    /// `--max-connections`, lowered on EMFILE.
    cap: AtomicUsize,
    header_timeout: Duration,
    idle_timeout: Duration,
    open: Mutex<Vec<Arc<Slot>>>,
    /// Told when a connection ends.
    freed: Notify,
}

impl Connections {
    pub(super) fn new(cap: usize, header_timeout: Duration, idle_timeout: Duration) -> Arc<Self> {
        metrics::describe_gauge!(
            "distlock_serve_connections",
            "HTTP connections open to distlock serve"
        );
        metrics::describe_counter!(
            "distlock_serve_connections_closed_total",
            "HTTP connections distlock serve closed, by reason: header_timeout, idle_timeout, \
             evicted (made way for a new connection over --max-connections)"
        );
        let (open, freed) = (Mutex::default(), Notify::new());
        let cap = AtomicUsize::new(cap);
        Arc::new(Connections {
            cap,
            header_timeout,
            idle_timeout,
            open,
            freed,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Arc<Slot>>> {
        // A panic while holding it leaves the list whole (pushes and removes only).
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answers the requests on `stream` with `app` until the client leaves, a limit closes it, or
    /// `graceful` stops it.
    pub(super) fn serve(
        self: &Arc<Self>,
        stream: TcpStream,
        app: Router,
        graceful: &GracefulShutdown,
    ) {
        let slot = Arc::new(Slot(watch::Sender::new((Doing::Idle, Instant::now()))));
        let open = {
            let mut open = self.lock();
            open.push(slot.clone());
            open.len()
        };
        metrics::gauge!("distlock_serve_connections").set(open as f64);
        let answering = slot.clone();
        let service = service_fn(move |request| {
            let (mut app, slot) = (app.clone(), answering.clone());
            async move {
                slot.shift(|doing, _| doing != Doing::Closing, Doing::Answering);
                let response = app.call(request).await;
                slot.shift(|doing, _| doing == Doing::Answering, Doing::Idle);
                response
            }
        });
        let io = TokioIo::new(Tracked(stream, slot.clone()));
        let connection = graceful.watch(http1::Builder::new().serve_connection(io, service));
        let connections = self.clone();
        tokio::spawn(async move {
            // A client that drops its connection mid-request is its business, not ours.
            let why = tokio::select! {
                _ = connection => None,
                why = connections.must_close(&slot) => Some(why),
            };
            connections.closed(&slot, why);
        });
    }

    /// Resolves when the connection of `slot` must be closed, saying why.
    async fn must_close(&self, slot: &Slot) -> &'static str {
        let mut seen = slot.0.subscribe();
        loop {
            let (doing, since) = *seen.borrow_and_update();
            let (limit, why) = match doing {
                Doing::Idle => (self.idle_timeout, "idle_timeout"),
                Doing::Reading => (self.header_timeout, "header_timeout"),
                Doing::Answering => (Duration::ZERO, ""),
                Doing::Closing => return "evicted",
            };
            tokio::select! {
                // No limit on an answer; a request that began meanwhile is answered.
                () = tokio::time::sleep_until(since + limit), if doing != Doing::Answering => {
                    if slot.shift(|now, at| (now, at) == (doing, since), Doing::Closing) {
                        return why;
                    }
                }
                _ = seen.changed() => {}
            }
        }
    }

    /// Forgets the connection of `slot`, closed by serve for `why` (None: by the client, or at
    /// shutdown).
    fn closed(&self, slot: &Arc<Slot>, why: Option<&'static str>) {
        let left = {
            let mut open = self.lock();
            open.retain(|open| !Arc::ptr_eq(open, slot));
            open.len()
        };
        metrics::gauge!("distlock_serve_connections").set(left as f64);
        if let Some(why) = why {
            metrics::counter!("distlock_serve_connections_closed_total", "reason" => why)
                .increment(1);
        }
        self.freed.notify_one();
    }

    /// Resolves once fewer connections than the cap are open: while the ones not already closing
    /// fill it, the one waiting longest for a request is closed; when every one is being
    /// answered, this waits for one to end.
    pub(super) async fn make_room(&self) {
        loop {
            {
                let open = self.lock();
                let cap = self.cap.load(Ordering::Relaxed);
                if open.len() < cap {
                    return;
                }
                let staying = open.iter().filter(|s| s.0.borrow().0 != Doing::Closing);
                if staying.count() >= cap
                    && let Some(slot) = open
                        .iter()
                        .filter(|s| s.waiting())
                        .min_by_key(|s| s.0.borrow().1)
                {
                    slot.shift(
                        |doing, _| matches!(doing, Doing::Idle | Doing::Reading),
                        Doing::Closing,
                    );
                }
            }
            // A permit stored by a connection that ended meanwhile wakes this at once.
            self.freed.notified().await;
        }
    }

    /// Out of file descriptors: the cap becomes the connections open now less [`FD_RESERVE`]
    /// (at least 1). Returns the new cap if it is lower than before.
    pub(super) fn out_of_files(&self) -> Option<usize> {
        let lowered = self.lock().len().saturating_sub(FD_RESERVE).max(1);
        let before = self.cap.fetch_min(lowered, Ordering::Relaxed);
        (lowered < before).then_some(lowered)
    }
}

/// A connection's socket, telling its slot when a request's first bytes come: hyper calls the
/// service once a header is whole, and says nothing when one begins.
struct Tracked(TcpStream, Arc<Slot>);

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.0).poll_read(cx, buf);
        // A look first: most reads are of a request already begun or being answered.
        if buf.filled().len() > before && self.1.0.borrow().0 == Doing::Idle {
            self.1
                .shift(|doing, _| doing == Doing::Idle, Doing::Reading);
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
