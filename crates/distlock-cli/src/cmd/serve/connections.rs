//! Keeps slow or idle clients from locking others out, as `serve --help` describes (issue #32:
//! 1,100 half-sent requests once held every file descriptor, and nothing closed them).
//!
//! hyper answers the requests; this is what it cannot do. Its `header_read_timeout` runs from
//! when it starts waiting for a request, not from the request's first byte, so it would close an
//! idle keep-alive connection at the header timeout and make `--idle-timeout` moot. A semaphore
//! makes a connection over the cap wait; here it takes the place of the one that has waited
//! longest for its request. Out of file descriptors (EMFILE), the cap drops to what is open then.

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
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tower_service::Service;

use super::ServeArgs;

/// File descriptors kept free when the cap is lowered on EMFILE: the store's connections and
/// files, and the listener's next accept.
const FD_RESERVE: usize = 16;

/// What a connection does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Doing {
    /// Accepted, not yet read: its request may be in the socket already, so it does not make way.
    New,
    /// Waiting for a request, none of whose bytes have come.
    Idle,
    /// A request's first bytes have come, not its whole header.
    Reading,
    Answering,
    /// Chosen to make room; its task closes it.
    Closing,
}

/// What a connection does and since when, changed in one step (so a connection is either chosen
/// to close or starts its answer, not both), and watched by the connection's task.
type Slot = watch::Sender<(Doing, Instant)>;

/// Moves `slot` to `to`, stamped now, if `from` holds for its state; false if not.
fn shift(slot: &Slot, from: impl Fn(Doing, Instant) -> bool, to: Doing) -> bool {
    slot.send_if_modified(|state| {
        let moving = from(state.0, state.1);
        if moving {
            *state = (to, Instant::now());
        }
        moving
    })
}

/// Every open connection, and the limits on them.
pub(super) struct Connections {
    /// `--max-connections`, lowered on EMFILE.
    cap: AtomicUsize,
    header_timeout: Duration,
    idle_timeout: Duration,
    open: Mutex<Vec<Arc<Slot>>>,
    /// Told when a connection ends, or may make way for another (read for the first time, or
    /// done answering).
    room: Notify,
}

impl Connections {
    pub(super) fn new(args: &ServeArgs) -> Arc<Self> {
        metrics::describe_gauge!(
            "distlock_serve_connections",
            "HTTP connections open to distlock serve"
        );
        metrics::describe_counter!(
            "distlock_serve_connections_closed_total",
            "HTTP connections distlock serve closed, by reason: header_timeout, idle_timeout, \
             evicted (made way for a new connection over --max-connections)"
        );
        Arc::new(Connections {
            cap: AtomicUsize::new(args.max_connections as usize),
            header_timeout: args.header_timeout,
            idle_timeout: args.idle_timeout,
            open: Mutex::default(),
            room: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Arc<Slot>>> {
        // A panic while holding it leaves the list whole (pushes and removes only).
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the list of open connections, and the gauge that counts them.
    fn update(&self, change: impl FnOnce(&mut Vec<Arc<Slot>>)) {
        let mut open = self.lock();
        change(&mut open);
        metrics::gauge!("distlock_serve_connections").set(open.len() as f64);
    }

    /// The next connection, once there is room for it (none is accepted while every open one is
    /// being answered). A failed accept (out of file descriptors, say) is said once, and retried
    /// after a pause that doubles from 10 ms to 1 s, so a lasting failure neither spins nor
    /// floods the log.
    pub(super) async fn accept(&self, listener: &TcpListener) -> TcpStream {
        let mut failed = 0u32;
        loop {
            let error = match listener.accept().await {
                Ok((stream, _)) => {
                    if failed > 0 {
                        eprintln!(
                            "distlock: serve: accepting connections again (after {failed} failed \
                             tries)"
                        );
                    }
                    self.make_room().await;
                    return stream;
                }
                Err(error) => error,
            };
            if failed == 0 {
                eprintln!("distlock: serve: cannot accept connections: {error}; retrying");
            }
            failed = failed.saturating_add(1);
            if matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                // The cap becomes the connections open now, less what the store and the next
                // accept need.
                let lowered = self.lock().len().saturating_sub(FD_RESERVE).max(1);
                if lowered < self.cap.fetch_min(lowered, Ordering::Relaxed) {
                    eprintln!(
                        "distlock: serve: out of file descriptors; at most {lowered} connections \
                         from now on (raise `ulimit -n` for more)"
                    );
                }
            }
            self.make_room().await;
            let pause = Duration::from_millis(10 << (failed - 1).min(7));
            tokio::time::sleep(pause.min(Duration::from_secs(1))).await;
        }
    }

    /// Answers the requests on `stream` with `app` until the client leaves, a limit closes the
    /// connection, or `graceful` stops it.
    pub(super) fn serve(
        self: &Arc<Self>,
        stream: TcpStream,
        app: Router,
        graceful: &GracefulShutdown,
    ) {
        let slot = Arc::new(Slot::new((Doing::New, Instant::now())));
        self.update(|open| open.push(slot.clone()));
        let (answering, connections) = (slot.clone(), self.clone());
        let service = service_fn(move |request| {
            let (mut app, slot, connections) =
                (app.clone(), answering.clone(), connections.clone());
            async move {
                shift(&slot, |doing, _| doing != Doing::Closing, Doing::Answering);
                let response = app.call(request).await;
                shift(&slot, |doing, _| doing == Doing::Answering, Doing::Idle);
                connections.room.notify_one();
                response
            }
        });
        let (read, write) = stream.into_split();
        let tracked = Tracked(read, slot.clone(), self.clone());
        let io = TokioIo::new(tokio::io::join(tracked, write));
        let connection = graceful.watch(http1::Builder::new().serve_connection(io, service));
        let connections = self.clone();
        tokio::spawn(async move {
            // A client that drops its connection mid-request is its business, not ours.
            let why = tokio::select! {
                _ = connection => None,
                why = connections.must_close(&slot) => Some(why),
            };
            connections.update(|open| open.retain(|open| !Arc::ptr_eq(open, &slot)));
            if let Some(why) = why {
                let reason = ("reason", why);
                metrics::counter!("distlock_serve_connections_closed_total", &[reason])
                    .increment(1);
            }
            connections.room.notify_one();
        });
    }

    /// Resolves when the connection of `slot` must be closed, saying why.
    async fn must_close(&self, slot: &Slot) -> &'static str {
        let mut seen = slot.subscribe();
        loop {
            let (doing, since) = *seen.borrow_and_update();
            let (limit, why) = match doing {
                Doing::Idle => (self.idle_timeout, "idle_timeout"),
                Doing::Reading => (self.header_timeout, "header_timeout"),
                Doing::New | Doing::Answering => (Duration::ZERO, ""),
                Doing::Closing => return "evicted",
            };
            tokio::select! {
                // No limit on an answer; a request that began meanwhile is answered.
                () = tokio::time::sleep_until(since + limit), if !why.is_empty() => {
                    if shift(slot, |now, at| (now, at) == (doing, since), Doing::Closing) {
                        return why;
                    }
                }
                _ = seen.changed() => {}
            }
        }
    }

    /// Resolves once fewer connections than the cap are open: while the ones not already closing
    /// fill it, the one waiting longest for a request is closed; when every one is being
    /// answered (or not read yet), this waits for one to end or become idle.
    async fn make_room(&self) {
        let waiting = |doing| matches!(doing, Doing::Idle | Doing::Reading);
        loop {
            {
                let open = self.lock();
                let cap = self.cap.load(Ordering::Relaxed);
                if open.len() < cap {
                    return;
                }
                let staying = open.iter().filter(|s| s.borrow().0 != Doing::Closing);
                if staying.count() >= cap
                    && let Some(slot) = open
                        .iter()
                        .filter(|s| waiting(s.borrow().0))
                        .min_by_key(|s| s.borrow().1)
                {
                    shift(slot, |doing, _| waiting(doing), Doing::Closing);
                }
            }
            // A permit stored by a connection that changed meanwhile wakes this at once.
            self.room.notified().await;
        }
    }
}

/// A connection's reading half, telling its slot when hyper first reads it and when a request's
/// first bytes come: hyper calls the service once a header is whole, and says nothing when one
/// begins.
struct Tracked(OwnedReadHalf, Arc<Slot>, Arc<Connections>);

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.0).poll_read(cx, buf);
        // A look first: most reads are of a request already begun or being answered.
        let (came, doing) = (buf.filled().len() > before, self.1.borrow().0);
        if came && matches!(doing, Doing::New | Doing::Idle) {
            shift(
                &self.1,
                |doing, _| matches!(doing, Doing::New | Doing::Idle),
                Doing::Reading,
            );
        } else if doing == Doing::New && polled.is_pending() {
            shift(&self.1, |doing, _| doing == Doing::New, Doing::Idle);
        }
        if doing == Doing::New {
            self.2.room.notify_one();
        }
        polled
    }
}
