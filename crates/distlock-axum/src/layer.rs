//! The layer and the service it wraps a handler in: take the request's lock, run the handler
//! with the guard in the request's extensions, release when the response is produced.

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use distlock::{Client, ErrorKind, Guard, Lock, LockKind};
use tower_layer::Layer;
use tower_service::Service;

use crate::extract::Held;
use crate::{KeyRequest, LockGuard, Undecodable};

/// The header a response carries when the lock was found lost after the handler had finished
/// (or, with [`OnLost::Mark`], while it ran): the work was done, but perhaps not alone.
pub const LOCK_LOST_HEADER: &str = "distlock-lock-lost";

/// What the layer does when the lease is lost while the handler runs (renewal failed, the
/// process was paused past the lease, the lock was forcibly released).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnLost {
    /// Drop the handler's future at its next `.await` (nothing after that point runs) and
    /// answer 503 with a body saying the lock was lost. The guard's clock is read before every
    /// poll of the handler, so a process resuming from a pause past its lease runs no further
    /// step of it. The default: a handler should not go on writing as if it still held the
    /// lock. What it wrote before is not undone; a write already sent to the store may still
    /// land: fence it with the guard's token.
    #[default]
    Cancel,
    /// Let the handler finish; its response then carries the [`LOCK_LOST_HEADER`] header. For
    /// handlers that must not stop halfway and whose writes are fenced anyway.
    Mark,
}

/// A [`tower_layer::Layer`] that runs each request under a distlock lock named by the request.
///
/// `key` maps a request to a lock name; `None` lets the request through without a lock. The
/// handler gets the guard with the [`LockGuard`] extractor. See the crate docs for an example.
///
/// Defaults: an exclusive lock ([`LockKind::Mutex`]), the client's default lease (30 s,
/// renewed while the handler runs), no wait (a held lock answers at once), 423 Locked when held,
/// [`OnLost::Cancel`].
pub struct LockLayer<K> {
    shared: Shared<K>,
}

struct Shared<K> {
    client: Client,
    key: Arc<K>,
    kind: LockKind,
    lease: Option<Duration>,
    max_hold: Option<Duration>,
    wait: Duration,
    when_held: StatusCode,
    on_lost: OnLost,
}

impl<K> Clone for LockLayer<K> {
    fn clone(&self) -> Self {
        LockLayer {
            shared: self.shared.clone(),
        }
    }
}

impl<K> Clone for Shared<K> {
    fn clone(&self) -> Self {
        Shared {
            client: self.client.clone(),
            key: self.key.clone(),
            kind: self.kind,
            lease: self.lease,
            max_hold: self.max_hold,
            wait: self.wait,
            when_held: self.when_held,
            on_lost: self.on_lost,
        }
    }
}

impl<K> fmt::Debug for LockLayer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shared;
        f.debug_struct("LockLayer")
            .field("backend", &s.client.backend_name())
            .field("kind", &s.kind)
            .field("lease", &s.lease)
            .field("max_hold", &s.max_hold)
            .field("wait", &s.wait)
            .field("when_held", &s.when_held)
            .field("on_lost", &s.on_lost)
            .finish_non_exhaustive()
    }
}

impl<K> LockLayer<K>
where
    K: Fn(&KeyRequest<'_>) -> Option<String> + Send + Sync + 'static,
{
    /// Locks each request by the name `key` gives it, in `client`'s store.
    pub fn new(client: Client, key: K) -> Self {
        LockLayer {
            shared: Shared {
                client,
                key: Arc::new(key),
                kind: LockKind::Mutex,
                lease: None,
                max_hold: None,
                wait: Duration::ZERO,
                when_held: StatusCode::LOCKED,
                on_lost: OnLost::Cancel,
            },
        }
    }

    fn with(mut self, change: impl FnOnce(&mut Shared<K>)) -> Self {
        change(&mut self.shared);
        self
    }

    /// Which flavour of lock: [`LockKind::Mutex`] (the default), [`LockKind::Fair`] (waiters
    /// served in order), [`LockKind::Read`] / [`LockKind::Write`] (the sides of a read-write
    /// lock: readers share it), or [`LockKind::Permit`] (one of N permits of a semaphore). A
    /// store without the flavour answers every request 503 (`Unsupported`, logged): end the
    /// builder with [`checked`](Self::checked) to fail when the router is built instead.
    pub fn kind(self, kind: LockKind) -> Self {
        self.with(|s| s.kind = kind)
    }

    /// The lease (see [`Lock::lease`]): how long a crashed or paused instance blocks the key.
    /// Renewed while the handler runs. An invalid lease answers every request 500 and is logged:
    /// [`checked`](Self::checked) refuses it when the router is built instead.
    pub fn lease(self, lease: Duration) -> Self {
        self.with(|s| s.lease = Some(lease))
    }

    /// Caps how long one request may keep its lock (see [`Lock::max_hold`]): renewal stops
    /// `max_hold` after the take, and once the lease after that ends the request is treated as
    /// one whose lease was lost — its handler stopped and 503 ([`OnLost::Cancel`]), or its
    /// response marked ([`OnLost::Mark`]). A stuck handler then blocks its key at most
    /// `max_hold` plus one lease. Zero answers every request 500 (an invalid setting).
    pub fn max_hold(self, max_hold: Duration) -> Self {
        self.with(|s| s.max_hold = Some(max_hold))
    }

    /// How long a request waits for a held lock before it is answered with
    /// [`when_held`](Self::when_held). Zero (the default) tries once.
    pub fn wait(self, wait: Duration) -> Self {
        self.with(|s| s.wait = wait)
    }

    /// The status when the lock is still held after the wait: 423 Locked by default. 423 says
    /// the resource is locked and says nothing else, so a client can tell it from the
    /// application's own 409 Conflict ("sold out", "version mismatch"); 503 (with the wait
    /// doubling as back-pressure) suits clients that retry 503s on their own.
    pub fn when_held(self, status: StatusCode) -> Self {
        self.with(|s| s.when_held = status)
    }

    /// What happens when the lease is lost while the handler runs: [`OnLost::Cancel`] (the
    /// default) or [`OnLost::Mark`].
    pub fn on_lost(self, on_lost: OnLost) -> Self {
        self.with(|s| s.on_lost = on_lost)
    }
    /// Whether `client`'s store can serve this layer's lock as it is set up (flavour, lease,
    /// `max_hold`): `Ok(())`, or the typed error every request would otherwise be answered
    /// with (500 or 503), for example [`ErrorKind::Unsupported`] for a flavour the store lacks
    /// or [`ErrorKind::InvalidLease`] for a lease it cannot keep. Asked of the client, with
    /// nothing sent to the store ([`Lock::check`]): whether the store can be reached is still
    /// learned request by request.
    pub fn check(&self) -> Result<(), distlock::Error> {
        self.shared.lock(CHECKED_NAME).check()
    }

    /// The layer, once [`check`](Self::check) found that the store can serve it: the last call
    /// of the builder, so that a misconfigured layer fails when the router is built, with the
    /// reason, instead of answering every request 500 or 503. Use it rather than a bare
    /// [`new`](Self::new) chain.
    ///
    /// ```no_run
    /// # async fn demo(client: distlock::Client) -> Result<(), distlock::Error> {
    /// use std::time::Duration;
    /// use distlock_axum::{KeyRequest, LockLayer};
    /// let by_sku = |req: &KeyRequest| Some(format!("stock:{}", req.path_param("sku")?));
    /// let layer = LockLayer::new(client, by_sku)
    ///     .kind(distlock::LockKind::Fair)
    ///     .lease(Duration::from_secs(5))
    ///     .checked()?; // Unsupported on a store without fair locks
    /// # let _ = layer; Ok(()) }
    /// ```
    pub fn checked(self) -> Result<Self, distlock::Error> {
        self.check().map(|()| self)
    }
}

/// The name [`LockLayer::check`] checks the settings with: any valid name, as requests' names
/// are checked request by request.
const CHECKED_NAME: &str = "distlock-axum/check";

impl<S, K> Layer<S> for LockLayer<K> {
    type Service = LockService<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService {
            inner,
            shared: Arc::new(self.shared.clone()),
        }
    }
}

/// The service [`LockLayer`] wraps around a handler (or any tower service).
pub struct LockService<S, K> {
    inner: S,
    shared: Arc<Shared<K>>,
}

impl<S: Clone, K> Clone for LockService<S, K> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: fmt::Debug, K> fmt::Debug for LockService<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, K, B> Service<Request<B>> for LockService<S, K>
where
    S: Service<Request<B>> + Clone + Send + 'static,
    S::Response: IntoResponse + Send,
    S::Error: Send,
    S::Future: Send + 'static,
    K: Fn(&KeyRequest<'_>) -> Option<String> + Send + Sync + 'static,
    B: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The clone that was polled ready serves this request; the fresh one waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        let (mut parts, body) = req.into_parts();
        let key_request = KeyRequest::new(&mut parts);
        let name = (shared.key)(&key_request);
        let undecodable = key_request.into_undecodable();
        Box::pin(async move {
            // Whatever the key function made of it: it is not the request's key.
            if let Some(e) = undecodable {
                return Ok(undecodable_key(&e));
            }
            let Some(name) = name else {
                let req = Request::from_parts(parts, body);
                return Ok(inner.call(req).await?.into_response());
            };
            let held = match shared.take(&name).await {
                Ok(Some(guard)) => Arc::new(Held::new(guard)),
                Ok(None) => return Ok(held(shared.when_held)),
                Err(e) => return Ok(refused(&name, &e)),
            };
            let lost = LockGuard(held.clone()).lost();
            parts.extensions.insert(LockGuard(held.clone()));
            let handler = inner.call(Request::from_parts(parts, body));
            let mut response = match shared.on_lost {
                OnLost::Cancel => match while_held(&held, handler, lost).await {
                    Ok(response) => response?.into_response(),
                    Err(why) => cancelled(&why),
                },
                OnLost::Mark => handler.await?.into_response(),
            };
            if !release(&held).await {
                response
                    .headers_mut()
                    .insert(LOCK_LOST_HEADER, HeaderValue::from_static("true"));
            }
            Ok(response)
        })
    }
}

impl<K> Shared<K> {
    fn lock(&self, name: &str) -> Lock {
        let c = &self.client;
        let lock = match self.kind {
            LockKind::Fair => c.fair_lock(name),
            LockKind::Read => c.rw_lock(name).read(),
            LockKind::Write => c.rw_lock(name).write(),
            LockKind::Permit { permits } => c.semaphore(name, permits),
            _ => c.lock(name),
        };
        let lock = match self.lease {
            Some(lease) => lock.lease(lease),
            None => lock,
        };
        match self.max_hold {
            Some(max_hold) => lock.max_hold(max_hold),
            None => lock,
        }
    }

    /// The guard, or `None` if the lock is still held by another after the wait.
    async fn take(&self, name: &str) -> distlock::Result<Option<Guard>> {
        let lock = self.lock(name);
        if self.wait.is_zero() {
            return lock.try_acquire().await;
        }
        match lock.acquire_timeout(self.wait).await {
            Ok(guard) => Ok(Some(guard)),
            Err(e) if e.kind() == ErrorKind::Timeout => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Runs `handler` while the layer's guard is held; `Err` with why, once it is lost.
///
/// Every poll looks at the lost signal and at the guard's clock before it polls the handler, so
/// a handler whose lease has ended runs no further step. Racing the two futures is not enough:
/// a process resuming from a pause past its lease wakes the handler's timers and the lost
/// signal's at once, and the handler, polled first, would run one more step without the lock;
/// polled second, it would still run one whenever the signal's timer had not fired yet. Once
/// the handler has released the guard itself, it runs to its end.
async fn while_held<F: Future>(
    held: &Held,
    handler: F,
    lost: impl Future<Output = distlock::Error>,
) -> Result<F::Output, distlock::Error> {
    let mut handler = pin!(handler);
    let mut lost = pin!(lost);
    poll_fn(|cx| {
        // Once released, the guard stays released: the signal, resolved or not, is not polled
        // again.
        if !held.released() {
            // The signal first: it has the store's reason when there is one, and it wakes this
            // task when the lease ends while the handler waits for something else.
            if let Poll::Ready(why) = lost.as_mut().poll(cx) {
                // It also resolves when the handler released the guard, which is no loss.
                if !held.released() {
                    return Poll::Ready(Err(why));
                }
            } else if let Some(why) = held.lost_by_clock() {
                return Poll::Ready(Err(why));
            }
        }
        handler.as_mut().poll(cx).map(Ok)
    })
    .await
}

/// Releases the layer's guard once the handler is done, unless the handler released it early.
/// `false` if the holding had been lost meanwhile (by the clock, by the store's answer, or found
/// gone at the release).
async fn release(held: &Held) -> bool {
    let Some(guard) = held.take() else {
        return true;
    };
    let lost = guard.is_lost();
    match guard.release().await {
        Ok(still_ours) => still_ours && !lost,
        Err(e) => {
            // Not the response's business: the lock frees at the end of its lease.
            tracing::warn!(error = %e, "releasing a request's lock failed");
            !lost
        }
    }
}

fn held(status: StatusCode) -> Response {
    (
        status,
        "the lock for this request is held by another; try again later\n",
    )
        .into_response()
}

/// The answer when a part the key is read from could not be decoded: the client's fault.
fn undecodable_key(e: &Undecodable) -> Response {
    tracing::warn!(error = %e, "a request's lock key could not be decoded");
    (
        StatusCode::BAD_REQUEST,
        "this request's lock key could not be decoded\n",
    )
        .into_response()
}

fn cancelled(why: &distlock::Error) -> Response {
    tracing::warn!(error = %why, "a request's lock was lost: its handler was stopped");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "the lock for this request was lost before the response: the handler was stopped, \
         its work may be partly done\n",
    )
        .into_response()
}

/// The answer when the lock could not be asked for: a name the request made invalid is the
/// request's fault (400), a setting the store refuses the application's (500), anything else
/// the store's (503). The error is logged (distlock's messages never carry URL passwords); the
/// client gets a short text without store details.
fn refused(name: &str, e: &distlock::Error) -> Response {
    let (status, text) = match e.kind() {
        ErrorKind::InvalidName => (
            StatusCode::BAD_REQUEST,
            "this request maps to an invalid lock name\n",
        ),
        ErrorKind::InvalidLease | ErrorKind::InvalidInput => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the lock for this request is misconfigured\n",
        ),
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the lock store is unavailable; try again later\n",
        ),
    };
    tracing::warn!(lock = name, error = %e, "taking a request's lock failed");
    (status, text).into_response()
}
