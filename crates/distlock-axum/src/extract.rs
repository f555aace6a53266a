//! The handler's side: the guard the layer took, as an extractor.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use distlock::{ErrorKind, FencingToken, Guard};
use futures_util::future::Either;

/// The lock [`LockLayer`](crate::LockLayer) took for this request: its fencing token, its lost
/// signal, its name, and an early release.
///
/// The layer releases the lock once the handler's response is produced. A handler whose last
/// steps need no lock (recording an order the buyer alone owns) may [`release`](Self::release)
/// it before them, so that the next request for the key need not wait for those steps.
///
/// As `Option<LockGuard>` it accepts requests the key function let through without a lock;
/// as `LockGuard` it rejects them with [`NoLock`] (500: the route is missing its layer).
#[derive(Clone)]
pub struct LockGuard(pub(crate) Arc<Held>);

/// The layer's guard, shared with the handler's extractor until one of them releases it.
pub(crate) struct Held {
    guard: Mutex<Option<Guard>>,
    token: FencingToken,
    name: String,
}

impl Held {
    pub(crate) fn new(guard: Guard) -> Self {
        Held {
            token: guard.fencing_token(),
            name: guard.name().to_string(),
            guard: Mutex::new(Some(guard)),
        }
    }

    /// The guard, unless it was released already; it is the caller's to release then.
    pub(crate) fn take(&self) -> Option<Guard> {
        self.guard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Whether the handler released the lock early.
    pub(crate) fn released(&self) -> bool {
        self.guard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }

    /// Why the layer's guard is lost, if its lease has ended by this process's clock
    /// ([`Guard::is_lost`] reads it on every call; [`Guard::lost`] sees it only once its timer
    /// has fired). `None` while it is held, and once the handler released it.
    pub(crate) fn lost_by_clock(&self) -> Option<distlock::Error> {
        let lost = self.with(|guard| guard.is_some_and(Guard::is_lost));
        lost.then(|| {
            distlock::Error::new(
                ErrorKind::LeaseLost,
                format!(
                    "lock {:?}: its lease ended by this process's clock (renewal failed or was \
                     late, or the process was paused past it)",
                    self.name
                ),
            )
        })
    }

    fn with<T>(&self, f: impl FnOnce(Option<&Guard>) -> T) -> T {
        f(self
            .guard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref())
    }
}

impl LockGuard {
    /// The fencing token of this holding: larger than every earlier holder's of the name. Pass
    /// it to the write, and have the store refuse a smaller one (`distlock::fence`).
    pub fn fencing_token(&self) -> FencingToken {
        self.0.token
    }

    /// The lock's name, as the key function gave it.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Resolves when the lease is lost (see [`Guard::lost`]); with [`OnLost::Cancel`](crate::OnLost)
    /// the layer already stops the handler then, so this is for handlers run with
    /// [`OnLost::Mark`](crate::OnLost) or work the handler spawns. After an early release it
    /// resolves at once (`NotHeld`). The future does not borrow the guard.
    pub fn lost(&self) -> impl Future<Output = distlock::Error> + Send + 'static {
        let lost = self
            .0
            .with(|guard| guard.map(|g| Box::pin(g.lost()) as LostFuture));
        match lost {
            Some(lost) => Either::Left(lost),
            None => Either::Right(std::future::ready(released_early(&self.0.name))),
        }
    }

    /// Whether the lease is lost (see [`Guard::is_lost`]); `true` after an early release.
    pub fn is_lost(&self) -> bool {
        self.0.with(|guard| guard.is_none_or(Guard::is_lost))
    }

    /// The instant the holding ends unless the store confirms it again (see
    /// [`Guard::valid_until`]); `None` after an early release.
    pub fn valid_until(&self) -> Option<Instant> {
        self.0.with(|guard| guard.and_then(Guard::valid_until))
    }

    /// Releases the lock now rather than when the response is produced. `Ok(true)` if it was
    /// still ours, `Ok(false)` if the lease had been lost; `NotHeld` if it was released already
    /// (by another clone of this extractor).
    ///
    /// # Cancel Safety
    ///
    /// As [`Guard::release`]: dropped before it finishes, the release goes on in the background.
    pub async fn release(self) -> distlock::Result<bool> {
        match self.0.take() {
            Some(guard) => guard.release().await,
            None => Err(released_early(&self.0.name)),
        }
    }
}

/// [`Guard::lost`]'s future, boxed: its type would otherwise carry the borrow of the guard it
/// came from, though it outlives it.
type LostFuture = Pin<Box<dyn Future<Output = distlock::Error> + Send + 'static>>;

fn released_early(name: &str) -> distlock::Error {
    distlock::Error::new(
        ErrorKind::NotHeld,
        format!("lock {name:?} was released before the response"),
    )
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.0.name)
            .field("fencing_token", &self.0.token)
            .field("released", &self.0.released())
            .finish()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for LockGuard {
    type Rejection = NoLock;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, NoLock> {
        parts.extensions.get::<LockGuard>().cloned().ok_or(NoLock)
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for LockGuard {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<LockGuard>().cloned())
    }
}

/// The rejection of [`LockGuard`] when no lock was taken for the request: 500, since it is the
/// application's wiring (no [`LockLayer`](crate::LockLayer) on the route, or a key function
/// that gave no name) and not the client's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoLock;

impl std::fmt::Display for NoLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "no lock was taken for this request: the route has no LockLayer, or its key \
             function named no lock",
        )
    }
}

impl std::error::Error for NoLock {}

impl IntoResponse for NoLock {
    fn into_response(self) -> Response {
        (StatusCode::INTERNAL_SERVER_ERROR, format!("{self}\n")).into_response()
    }
}
