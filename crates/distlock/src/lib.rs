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
//! # Testing your application
//!
//! Code that takes a [`Client`] (or a [`Lock`], [`Election`], [`Latch`] made from one) does not
//! care which store it came from, so its unit tests can hand it one from the in-memory backend
//! (the `memory` feature, e.g. only under `[dev-dependencies]`): `connect("memory:")` gives a
//! store of its own, empty, with every flavour, election, latch, status and forced release, and
//! no server. Its leases run on tokio's clock, so a test on paused time
//! (`tokio::time::pause()`, tokio's `test-util` feature) lets a lease run out in no time:
//!
//! ```
//! use std::time::Duration;
//!
//! /// The application's job: runs only if no other instance is running it.
//! async fn nightly_report(client: &distlock::Client) -> distlock::Result<bool> {
//!     let lock = client.lock("report:nightly").lease(Duration::from_secs(60));
//!     match lock.try_acquire().await? {
//!         Some(guard) => Ok(guard.release().await?), // … the work, then release
//!         None => Ok(false),                          // another instance has it
//!     }
//! }
//!
//! #[tokio::test] // a current-thread runtime, which paused time needs
//! async fn a_crashed_instance_blocks_the_report_for_one_lease() -> distlock::Result<()> {
//!     tokio::time::pause();
//!     let client = distlock::connect("memory:").await?;
//!     // Another instance took the lock and died: nothing renews its lease.
//!     let crashed = client.lock("report:nightly").lease(Duration::from_secs(60)).no_watchdog();
//!     crashed.acquire().await?.leak();
//!     assert!(!nightly_report(&client).await?);
//!     tokio::time::advance(Duration::from_secs(61)).await; // no real wait
//!     assert!(nightly_report(&client).await?);
//!     Ok(())
//! }
//! # fn main() {}
//! ```
//!
//! `advance` jumps at once, and a holder's watchdog renews on its own timers: to let time pass
//! for a holder that should keep its lock, sleep instead (the paused clock then moves from timer
//! to timer) or advance by less than a third of the lease at a time.
//!
//! `memory://NAME` is instead the store of that name in the process, shared by every client
//! that connects to it, for a test of two "instances" that each connect on their own. It is one
//! process's memory: not a distributed lock, and no stand-in for the real store in tests of
//! crashes, pauses or failovers (its page, `memory` under [`backends`], says what it is for and what not).
//!
//! # Layout
//!
//! * [`client`]: `connect(url)` and the scheme table; [`Client`] makes locks.
//! * [`lock`], [`guard`]: the user API ([`Lock`], [`Guard`], [`MultiLock`]).
//! * [`election`]: leader election over the lock ([`Election`], [`Leadership`], [`Leader`]);
//!   [`latch`]: the count-down latch ([`Latch`]). Both written once; a backend supplies a few
//!   record and counter steps.
//! * `backend`: the `Backend` trait — the few steps of the lock that must be atomic in a
//!   store — and a trait for each thing a store may offer beyond it (semaphore sizing, election
//!   records, latches, inspection), reached by an accessor of `Backend`.
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
#[cfg(feature = "serde")]
mod config_serde;
mod core;
pub mod election;
pub mod error;
pub mod fence;
pub mod guard;
pub mod latch;
pub mod lock;
pub mod metrics;
mod options;
#[cfg(feature = "redis")]
mod redis_support;
pub mod sql;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite-fence"))]
mod sqlx_support;
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
