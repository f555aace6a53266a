//! The handler's side: the guard the layer took, as an extractor.

use std::ops::Deref;
use std::sync::Arc;

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use distlock::Guard;

/// The lock [`LockLayer`](crate::LockLayer) took for this request: its
/// [`fencing_token`](Guard::fencing_token), [`lost`](Guard::lost) signal and name.
///
/// The layer releases it once the handler's response is produced; the handler cannot release it
/// early (it holds a shared reference). A clone kept past the response (moved into a spawned
/// task) keeps the lock until it is dropped.
///
/// As `Option<LockGuard>` it accepts requests the key function let through without a lock;
/// as `LockGuard` it rejects them with [`NoLock`] (500: the route is missing its layer).
#[derive(Clone)]
pub struct LockGuard(pub Arc<Guard>);

impl Deref for LockGuard {
    type Target = Guard;

    fn deref(&self) -> &Guard {
        &self.0
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.0.name())
            .field("fencing_token", &self.0.fencing_token())
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
