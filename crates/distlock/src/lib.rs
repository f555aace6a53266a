//! # distlock
//!
//! Distributed locks with leases, fencing tokens and a "lock lost" signal, over the stores you
//! already run — one API for all of them. For the instances of a service that must not do the
//! same work at once (a stock deduction, a payment, a nightly job, leader work): the lock
//! says who may work, its lease frees it when a holder crashes, its fencing token lets the
//! resource refuse a holder that was paused past its lease, and `lost()` tells a holder to stop.
//!
//! # Choose a store
//!
//! Each store is a cargo feature; the URL picks the store at run time ([`connect`]). The
//! default feature is the embedded SQLite store: locks across the processes of one machine,
//! with no server.
//!
//! | feature | store | URL | its page |
//! |---|---|---|---|
//! | `sqlite` (default) | an SQLite file, one machine | `sqlite:PATH` | [`backends::sqlite`](backends/sqlite/index.html) |
//! | `redis` | Redis: one server, Sentinel, Cluster | `redis://`, `rediss://`, `redis-sentinel://`, `redis-cluster://` | [`backends::redis`](backends/redis/index.html) |
//! | `redlock` | Redlock over independent Redis masters | `redlock://h1:p1,h2:p2,h3:p3` | [`backends::redlock`](backends/redlock/index.html) |
//! | `postgres` | PostgreSQL | `postgres://` | [`backends::postgres`](backends/postgres/index.html) |
//! | `mysql` | MySQL, MariaDB | `mysql://`, `mariadb://` | [`backends::mysql`](backends/mysql/index.html) |
//! | `etcd` | etcd v3 | `etcd://`, `etcds://` | [`backends::etcd`](backends/etcd/index.html) |
//! | `zookeeper` | ZooKeeper (Curator's layout) | `zk://h1:p1[,…][/chroot]` | [`backends::zookeeper`](backends/zookeeper/index.html) |
//! | `memcached` | memcached | `memcached://h1:p1[,…]` | [`backends::memcached`](backends/memcached/index.html) |
//! | `object-store` | object storage: Amazon S3 and S3-compatibles, Azure Blob Storage; no lock server | `s3://BUCKET[/PREFIX]`, `az://CONTAINER[/PREFIX]` | [`backends::objectstore`](backends/objectstore/index.html) |
//! | `memory` | one process's memory, for your unit tests | `memory:`, `memory://NAME` | [`backends::memory`](backends/memory/index.html) |
//!
//! Each store's page (under [`backends`]; the docs of a build have the pages of its features)
//! states what it guarantees,
//! what breaks each guarantee, and its URL parameters. Not every store keeps every flavour: a
//! flavour a store lacks is [`ErrorKind::Unsupported`] ([`Client::supports`] says so up front).
//! Other features: `sqlite-fence` (the SQLite fence through sqlx), `serde` (status and leader
//! types, and [`Options`], as serde values).
//!
//! # The safe path: [`Lock::run`]
//!
//! Waits for the lock, runs the work while the watchdog renews the lease, releases, and answers
//! `Ok` only if the lock was held throughout; a lost lease stops the work at its next `.await`:
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> distlock::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # std::env::set_current_dir(dir.path()).unwrap(); // ./locks.db: in a temporary directory
//! let client = distlock::connect("sqlite:./locks.db").await?;
//! let sold = client
//!     .lock("stock:sku-42")
//!     .run(async |guard| {
//!         let token = guard.fencing_token(); // strictly increasing per lock name:
//!         token.get()                         // pass it to the resource, which refuses smaller
//!     })
//!     .await?;
//! # assert!(sold > 0);
//! # Ok(()) }
//! ```
//!
//! # Holding a guard yourself
//!
//! A [`Guard`] stands for one holding; it is released on drop on any path (a `?`, a panic), and
//! `release().await` says whether it was still held:
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
//! Beyond the lock, on the same [`Client`]: [`Client::fair_lock`], [`Client::rw_lock`],
//! [`Client::semaphore`], [`Client::multi_lock`] (all or nothing), [`Client::election`] (leader
//! election with terms and observers) and [`Client::latch`] (a count-down latch); [`fence`]
//! makes a resource refuse a late write, and [`sql`] has the database techniques that are not a
//! lock (a row lock in your own transaction, optimistic version checks).
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
//! How the code is laid out (the `Backend` contract a store implements, the core written once
//! for every store, one folder per store) is the repository's `docs/architecture.md`.
//!
//! # Stability
//!
//! The API these pages show is the one semver covers. A few public items are hidden from them
//! and are not covered: they exist for the `distlock` command and the repository's conformance
//! suite and may change in any release — the `backend` contract (the `Backend` trait and its
//! types, `Client::from_backend`, `Client::backend`), the `url` helpers (`distlock::redact`
//! stays), the constructors of the status types, and the backends' `end_session`.
//!
//! Some of that API is made of other crates' types: `sqlx` (`SqlFence<DB>`, `RowLock`,
//! `PostgresBackend` and `MysqlBackend`'s `from_pool` and `pool()`), `redis`
//! (`RedisFence<C>`, `RedisBackend::from_client` and the other constructors taking the
//! application's client), `etcd_client` (`EtcdBackend::from_client`) and `zookeeper_client`
//! (`ZooKeeperBackend::from_connector`). Moving to a new major version of one of them is a new
//! major version of distlock, announced in the changelog; CI compares every change's API with the
//! last release (`cargo semver-checks`), so no break lands unannounced.
#![warn(missing_docs, unreachable_pub)]
// Every unsafe block says why it is sound.
#![warn(clippy::undocumented_unsafe_blocks)]
// docs.rs shows which feature each item needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

// Not covered by semver (see Stability): the contract the backends, the CLI and the testkit share.
#[doc(hidden)]
pub mod backend;
pub mod backends;
pub mod client;
#[cfg(any(
    feature = "redis",
    feature = "etcd",
    feature = "zookeeper",
    feature = "postgres",
    feature = "mysql"
))]
mod config_debug;
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
