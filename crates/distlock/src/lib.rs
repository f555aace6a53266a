//! # distlock
//!
//! Distributed locks with leases, fencing tokens and a "lock lost" signal, over the stores you
//! already run — one API for all of them.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> distlock::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # std::env::set_current_dir(dir.path()).unwrap(); // ./locks.db: in a temporary directory
//! let client = distlock::connect("sqlite:./locks.db").await?;
//! let lock = client.lock("order:42");
//! let guard = lock.acquire().await?;              // waits; the lease is renewed until release
//! let token = guard.fencing_token();              // strictly increasing per lock name
//! tokio::select! {
//!     _ = async { /* work, passing `token` to the resource */ } => {}
//!     lost = guard.lost() => return Err(lost),    // renewal failed: stop writing
//! }
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! * [`client`]: `connect(url)` and the scheme table; [`Client`] makes locks.
//! * [`lock`], [`guard`]: the user API ([`Lock`], [`Guard`], [`MultiLock`]).
//! * [`election`]: leader election over the lock ([`Election`], [`Leadership`], [`Leader`]);
//!   [`latch`]: the count-down latch ([`Latch`]). Both written once; a backend supplies a few
//!   record and counter steps.
//! * `backend`: the `Backend` trait — the few steps that must be atomic in a store.
//! * `core`: written once for every backend — the wait loop, the watchdog and lost signal,
//!   reentrant holders sharing one holding. It stands alone: the user API wraps it.
//! * [`backends`]: one folder per store behind its cargo feature, with its SQL or Lua in files
//!   and a `docs.md` stating its guarantees.
//! * [`fence`]: make the resource refuse a paused holder's late write: fencing-token checks in
//!   the caller's SQL transaction or Redis script, atomic with the write.
//! * [`sql`]: database techniques that are not a `Lock`: the row lock held by your own
//!   transaction, optimistic version checks with bounded retries.
//!
//! # Stability
//!
//! The API these pages show is the one semver covers. A few public items are hidden from them
//! and are not covered: they exist for the `distlock` command and the repository's conformance
//! suite and may change in any release — the `backend` contract (the `Backend` trait and its
//! types, `Client::from_backend`, `Client::backend`), the `url` helpers (`distlock::redact`
//! stays), the constructors of the status types, and the backends' `end_session`.
#![warn(missing_docs, unreachable_pub)]
// docs.rs shows which feature each item needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

// Not covered by semver (see Stability): the contract the backends, the CLI and the testkit share.
#[doc(hidden)]
pub mod backend;
pub mod backends;
pub mod client;
mod core;
pub mod election;
pub mod error;
pub mod fence;
pub mod guard;
pub mod latch;
pub mod lock;
pub mod metrics;
mod options;
pub mod sql;
pub mod status;
#[cfg(test)]
mod sync_tests;
mod types;
// Not covered by semver (see Stability); `redact` is re-exported below.
#[doc(hidden)]
pub mod url;

#[doc(hidden)]
pub use backend::{Attempt, Backend, Capabilities, ElectionEntry, LockRequest};
pub use client::{Client, DEFAULT_URL, RwLock, connect, connect_with};
pub use election::{Election, Leader, Leadership};
pub use error::{Error, ErrorKind, Result};
pub use guard::Guard;
pub use latch::Latch;
pub use lock::{Lock, MultiGuard, MultiLock};
pub use options::Options;
#[doc(hidden)]
pub use status::Selection;
pub use status::{ForcedRelease, Holder, Holding, LockStatus};
pub use types::{FencingToken, Lease, LockKind, LockName, OwnerToken};
pub use url::redact;

// The READMEs' and docs/' code is compiled with the doctests (the project's blocks use the SQL and Redis
// fences; the project README is outside the package, so only a build in the repository has it).
#[cfg(all(doctest, feature = "sqlite", feature = "postgres", feature = "redis"))]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;

#[cfg(all(doctest, feature = "sqlite", feature = "postgres", feature = "redis"))]
#[doc = include_str!("../../../docs/election.md")]
struct ElectionDocDoctests;

#[cfg(all(doctest, feature = "sqlite", feature = "postgres", feature = "redis"))]
#[doc = include_str!("../../../docs/fencing.md")]
struct FencingDocDoctests;
