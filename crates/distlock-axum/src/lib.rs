//! # distlock-axum
//!
//! Lock an axum handler by a key of its request — "one order per SKU at a time, across every
//! instance" — with [distlock](https://docs.rs/distlock): a [`tower_layer::Layer`] that takes the
//! lock before the handler runs and releases it when the response is produced, and an extractor,
//! [`LockGuard`], that gives the handler the guard and its fencing token.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use axum::Router;
//! use axum::http::StatusCode;
//! use axum::routing::post;
//! use distlock_axum::{KeyRequest, LockGuard, LockLayer};
//!
//! async fn order(guard: LockGuard) -> String {
//!     // Pass the token to the store's write, which refuses one smaller than it has seen:
//!     // a handler paused past its lease then cannot overwrite a newer holder's work.
//!     let token = guard.fencing_token().get();
//!     format!("sold under token {token}\n")
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let client = distlock::connect("sqlite:./locks.db").await?; // or redis://…, postgres://…
//!     let app = Router::new().route("/order/{sku}", post(order)).layer(
//!         LockLayer::new(client, |req: &KeyRequest| {
//!             Some(format!("stock:{}", req.path_param("sku")?))
//!         })
//!         .lease(Duration::from_secs(10))   // a crashed instance blocks the SKU this long
//!         .wait(Duration::from_millis(500)) // then answer…
//!         .when_held(StatusCode::LOCKED)    // …423 (the default)
//!         .checked()?,                      // a setting the store cannot serve fails here
//!     );
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//!     axum::serve(listener, app).await?;
//!     Ok(())
//! }
//! ```
//!
//! # What the layer does with a request
//!
//! 1. The key function maps the request's head to a lock name ([`KeyRequest`]: path parameters,
//!    headers, query, or anything in [`KeyRequest::parts`]). `None` lets the request through
//!    unlocked (a `GET`, say); [`LockGuard`] then rejects it, `Option<LockGuard>` accepts it.
//!    A request whose key cannot be decoded — the function read a path parameter that is not
//!    UTF-8 once percent-decoded (`%FF`), or a header that is present but not visible ASCII —
//!    is answered 400 and its handler does not run, whatever the function returned: it runs
//!    neither unlocked nor under another key's lock. [`KeyRequest::try_path_param`] and
//!    [`KeyRequest::try_header`] tell "absent" from "undecodable" ([`Undecodable`]) and leave
//!    the answer to the key function.
//! 2. The lock is taken: tried once by default, or waited for up to [`LockLayer::wait`]. Still
//!    held: the status of [`LockLayer::when_held`] (423 Locked by default, so that a client tells
//!    contention from the application's own 409s; 409 or 503 if preferred). A store that fails
//!    or cannot be reached: 503 with a short text (the error goes to `tracing`, and distlock's
//!    messages never carry URL passwords). A key that makes an invalid lock name: 400.
//! 3. The handler runs with the guard in the request's extensions; the watchdog renews the lease
//!    meanwhile. Before each poll of the handler's future the layer checks the guard's lost
//!    signal and its clock: once the lease is lost (the store refused a renewal, the process
//!    was paused past the lease, the lock was forcibly released, or [`LockLayer::max_hold`]
//!    stopped its renewal and the lease after it ended), the handler is not polled
//!    again — its future is dropped and the answer is 503 ([`OnLost::Cancel`], the default) —
//!    or it finishes and its response is marked with the [`LOCK_LOST_HEADER`] header
//!    ([`OnLost::Mark`]).
//! 4. When the handler's future completes, the lock is released before the response is sent:
//!    the next request for the key can have it at once. A handler whose last steps need no lock
//!    can release it earlier ([`LockGuard::release`]). If the release finds the holding gone,
//!    the response is marked with [`LOCK_LOST_HEADER`]. If the handler panics or the client
//!    disconnects, the guard is dropped and distlock releases it in the background.
//!
//! Cancelling is not undoing: a write the handler had already sent may land after the lock is
//! lost. That is what fencing is for — write through `distlock::fence` (SQL, Redis) with the
//! guard's token, and a late write is refused.
//!
//! # A body field as the key
//!
//! The lock is taken before the handler reads the body, so the key function sees the head only.
//! To lock by a field of a JSON body, take the lock in the handler instead, after parsing:
//! `client.lock(format!("stock:{}", body.sku)).acquire_timeout(wait)`, then race the work
//! against `guard.lost()` and check `guard.is_lost()` before each step, as this layer does; or
//! have the client put the key in the path or a header, which also lets a proxy route by it.
//!
//! # Layout
//!
//! * `layer.rs`: [`LockLayer`] (settings), [`LockService`] (take, run while held, release,
//!   answers).
//! * `key.rs`: [`KeyRequest`], what the key function sees, and [`Undecodable`].
//! * `extract.rs`: [`LockGuard`] and its rejection [`NoLock`].
#![warn(missing_docs, unreachable_pub)]

mod extract;
mod key;
mod layer;

pub use extract::{LockGuard, NoLock};
pub use key::{KeyRequest, Undecodable};
pub use layer::{LOCK_LOST_HEADER, LockLayer, LockService, OnLost};

// The README's example is compiled as a doctest too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
