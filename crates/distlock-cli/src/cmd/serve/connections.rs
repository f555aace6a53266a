//! The connections `serve` keeps open, so that slow or idle clients cannot lock others out
//! (issue #32: 1,100 half-sent requests once held every file descriptor, and nothing closed them).
//!
//! * A request whose header has not all come `--header-timeout` after its first byte is closed.
//! * A connection with no request under way for `--idle-timeout` (a new one that sends nothing,
//!   or one kept alive after an answer) is closed.
//! * At most `--max-connections` are open. A connection beyond it takes the place of the open one
//!   that has waited longest for its request (that one is closed); when every open one is being
//!   answered, it waits until one ends. Nobody is refused: a client that sends its request gets
//!   its answer, at worst after a request being answered now.
//! * Running out of file descriptors (EMFILE) lowers the cap to what was open then, less
//!   [`FD_RESERVE`] for the store and the answers, and makes room the same way.
//!
//! A request being answered is never closed to make room: the state is changed by one
//! compare-and-swap, so a connection is either chosen to close or starts its answer, not both.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

/// File descriptors kept free when the cap is lowered on EMFILE: the store's connections and
/// files, and the listener's next accept.
const FD_RESERVE: usize = 16;

/// How many connections may be open, and how long they may take.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub(super) max_connections: usize,
    pub(super) header_timeout: Duration,
    pub(super) idle_timeout: Duration,
}

/// What a connection is doing, in the low two bits of [`Slot::state`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Doing {
    /// Waiting for a request, none of whose bytes have come.
    Idle = 0,
    /// A request's first bytes have come, not its whole header.
    Reading = 1,
    /// A request is being answered.
    Answering = 2,
    /// Chosen to make room; its task closes it.
    Closing = 3,
}

impl Doing {
    fn from_bits(bits: u64) -> Doing {
        match bits & 3 {
            0 => Doing::Idle,
            1 => Doing::Reading,
            2 => Doing::Answering,
            _ => Doing::Closing,
        }
    }
}

/// Why serve closed a connection (the label of `distlock_serve_connections_closed_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Closed {
    /// Its header had not all come within the header timeout.
    HeaderTimeout,
    /// No request for the idle timeout.
    IdleTimeout,
    /// It had waited longest for a request when another came over the cap.
    Evicted,
}

impl Closed {
    fn label(self) -> &'static str {
        match self {
            Closed::HeaderTimeout => "header_timeout",
            Closed::IdleTimeout => "idle_timeout",
            Closed::Evicted => "evicted",
        }
    }
}

/// One open connection's state, shared by its task, its reads and its service.
pub(super) struct Slot {
    /// The registry's epoch: `since` counts milliseconds from it.
    epoch: Instant,
    /// `since << 2 | Doing`: what the connection does and since when, changed in one step.
    state: AtomicU64,
    /// Told when the connection is chosen to close.
    close: Notify,
}

impl Slot {
    fn load(&self) -> (Doing, u64) {
        let bits = self.state.load(Ordering::Acquire);
        (Doing::from_bits(bits), bits >> 2)
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Moves to `to`, stamped now, if the connection does one of `from`; false if it does not.
    fn shift(&self, from: &[Doing], to: Doing) -> bool {
        let stamped = (self.now() << 2) | to as u64;
        self.state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |bits| {
                from.contains(&Doing::from_bits(bits)).then_some(stamped)
            })
            .is_ok()
    }

    /// A request's header has all come: it is being answered from now on.
    pub(super) fn answering(&self) {
        self.shift(&[Doing::Idle, Doing::Reading], Doing::Answering);
    }

    /// The answer is written: the connection waits for its next request.
    pub(super) fn answered(&self) {
        self.shift(&[Doing::Answering], Doing::Idle);
    }

    /// Bytes came: if the connection was waiting, a request has begun.
    fn bytes_came(&self) {
        // A load first: most reads are of a request already begun or being answered.
        if self.load().0 == Doing::Idle {
            self.shift(&[Doing::Idle], Doing::Reading);
        }
    }

    /// Resolves when the connection must be closed, saying why.
    pub(super) async fn must_close(&self, limits: &Limits) -> Closed {
        loop {
            let (doing, since) = self.load();
            let (limit, why) = match doing {
                Doing::Idle => (limits.idle_timeout, Some(Closed::IdleTimeout)),
                Doing::Reading => (limits.header_timeout, Some(Closed::HeaderTimeout)),
                // No limit on an answer: look again later.
                Doing::Answering => (limits.header_timeout, None),
                Doing::Closing => return Closed::Evicted,
            };
            let deadline = match why {
                Some(_) => self.epoch + Duration::from_millis(since) + limit,
                None => Instant::now() + limit,
            };
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {
                    // Unless it moved on meanwhile (the loop then sets the next deadline).
                    if let Some(why) = why && self.load() == (doing, since) {
                        return why;
                    }
                }
                () = self.close.notified() => return Closed::Evicted,
            }
        }
    }
}

/// Every open connection, and the cap on them.
pub(super) struct Connections {
    limits: Limits,
    /// The cap: `--max-connections`, lowered on EMFILE.
    cap: AtomicUsize,
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Slot>>>,
    /// Told when a connection ends.
    freed: Notify,
}

impl Connections {
    pub(super) fn new(limits: Limits) -> Arc<Connections> {
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
            limits,
            cap: AtomicUsize::new(limits.max_connections),
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
            freed: Notify::new(),
        })
    }

    pub(super) fn limits(&self) -> &Limits {
        &self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Slot>>> {
        // A panic while holding it leaves the map whole (inserts and removes only).
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a new connection, waiting for its request.
    pub(super) fn open(&self) -> (u64, Arc<Slot>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let now = self.epoch.elapsed().as_millis() as u64;
        let slot = Arc::new(Slot {
            epoch: self.epoch,
            state: AtomicU64::new((now << 2) | Doing::Idle as u64),
            close: Notify::new(),
        });
        let mut open = self.lock();
        open.insert(id, slot.clone());
        metrics::gauge!("distlock_serve_connections").set(open.len() as f64);
        (id, slot)
    }

    /// Forgets connection `id`, closed by serve for `why` (None: by the client, or at shutdown).
    pub(super) fn closed(&self, id: u64, why: Option<Closed>) {
        let left = {
            let mut open = self.lock();
            open.remove(&id);
            open.len()
        };
        metrics::gauge!("distlock_serve_connections").set(left as f64);
        if let Some(why) = why {
            metrics::counter!("distlock_serve_connections_closed_total", "reason" => why.label())
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
                if open.len() < self.cap.load(Ordering::Relaxed) {
                    return;
                }
                let staying = open.values().filter(|s| s.load().0 != Doing::Closing);
                if staying.count() >= self.cap.load(Ordering::Relaxed) {
                    let waiting_longest = open
                        .values()
                        .filter(|s| matches!(s.load().0, Doing::Idle | Doing::Reading))
                        .min_by_key(|s| s.load().1);
                    if let Some(slot) = waiting_longest
                        && slot.shift(&[Doing::Idle, Doing::Reading], Doing::Closing)
                    {
                        slot.close.notify_one();
                    }
                }
            }
            // A permit stored by a connection that ended meanwhile wakes this at once.
            self.freed.notified().await;
        }
    }

    /// Out of file descriptors: the cap becomes the connections open now less [`FD_RESERVE`]
    /// (at least 1). Returns the new cap if it is lower than before.
    pub(super) fn out_of_files(&self) -> Option<usize> {
        let open = self.lock().len();
        let lowered = open.saturating_sub(FD_RESERVE).max(1);
        let before = self.cap.fetch_min(lowered, Ordering::Relaxed);
        (lowered < before).then_some(lowered)
    }
}

/// A connection's socket, telling its [`Slot`] when a request's first bytes come.
pub(super) struct Tracked {
    stream: TcpStream,
    slot: Arc<Slot>,
}

impl Tracked {
    pub(super) fn new(stream: TcpStream, slot: Arc<Slot>) -> Tracked {
        Tracked { stream, slot }
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.slot.bytes_came();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// Failed accepts in a row: said once when they begin and once when they end, with a pause
/// between tries that doubles from 10 ms to 1 s, so a lasting failure neither spins nor floods
/// the log.
#[derive(Default)]
pub(super) struct AcceptFailures {
    in_a_row: u32,
}

impl AcceptFailures {
    /// Notes a failed accept (saying it if it is the first in a row) and pauses.
    pub(super) async fn failed(&mut self, error: &io::Error) {
        if self.in_a_row == 0 {
            eprintln!("distlock: serve: cannot accept connections: {error}; retrying");
        }
        self.in_a_row = self.in_a_row.saturating_add(1);
        let pause = Duration::from_millis(10).saturating_mul(1 << (self.in_a_row - 1).min(7));
        tokio::time::sleep(pause.min(Duration::from_secs(1))).await;
    }

    /// Notes a successful accept.
    pub(super) fn succeeded(&mut self) {
        if self.in_a_row > 0 {
            eprintln!(
                "distlock: serve: accepting connections again (after {} failed tries)",
                self.in_a_row
            );
            self.in_a_row = 0;
        }
    }
}

/// Whether `error` is the process (EMFILE) or the system (ENFILE) out of file descriptors.
pub(super) fn out_of_files(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}
