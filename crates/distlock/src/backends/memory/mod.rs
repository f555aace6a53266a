//! The in-memory backend: locks in this process's memory, for an application's own unit tests.
//! One process only, nothing persisted; not a distributed lock. Its guarantees are below.
//!
//! # Layout
//!
//! * this file: [`MemoryBackend`], the stores by name, the methods of [`Backend`] and of every
//!   trait it adds (semaphores, elections, latches, inspection);
//! * `locks.rs`: the plain lock, the fair lock, the read-write lock and the semaphore, each step
//!   atomic under the store's mutex, judged by the rules the SQL stores share
//!   (`backends/client_rules/flavour_rules.rs`); leases on tokio's clock;
//! * `sync.rs`: election records and count-down latches.
//!
#![doc = include_str!("docs.md")]

mod locks;
mod sync;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use self::locks::Locks;
use self::sync::{Elections, Latches};
use crate::backend::{
    Attempt, Backend, Capabilities, ElectionEntry, ElectionWrite, Inspection, Kinds, LockRequest,
    PermitCount, Semaphores, Waiter, Wakeups,
};
use crate::backends::client_rules::flavour_rules::Side;
use crate::backends::client_rules::flavour_waiter::{FlavourSteps, SqlFlavourWaiter};
use crate::error::Result;
use crate::status::{ForcedRelease, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName};

const NAME: &str = "memory";

/// What every client of one store shares.
#[derive(Default)]
struct Store {
    locks: Locks,
    elections: Elections,
    latches: Latches,
}

/// The stores `memory://NAME` names, for the life of the process.
static NAMED: LazyLock<Mutex<HashMap<String, Arc<Store>>>> = LazyLock::new(Default::default);

/// Locks in this process's memory. Built by [`crate::connect`] from `memory:` (a store of its
/// own) or `memory://NAME` (the store of that name, shared by every client in the process that
/// connects to it).
pub struct MemoryBackend {
    store: Arc<Store>,
    /// The store's name; `None` for a store of its own.
    name: Option<String>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("store", &self.name)
            .finish()
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// A store of its own, empty: what the URL `memory:` opens.
    pub fn new() -> Self {
        MemoryBackend {
            store: Arc::default(),
            name: None,
        }
    }

    /// The store named `name` in this process, shared by every client that names it, made if
    /// none is yet: what the URL `memory://NAME` opens. A name is letters, digits, `-`, `_` and
    /// `.` (`InvalidUrl` otherwise, as for the URL).
    pub fn named(name: &str) -> Result<Self> {
        Self::connect(&format!("memory://{name}"))
    }

    /// The store `url` names: `memory:` makes a new one; `memory://NAME` finds the one of that
    /// name in this process, or makes it.
    pub fn connect(url: &str) -> Result<Self> {
        let name = crate::url::memory_store(url)?;
        let store = match &name {
            None => Arc::default(),
            Some(name) => NAMED
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(name.clone())
                .or_default()
                .clone(),
        };
        Ok(MemoryBackend { store, name })
    }
}

#[async_trait]
impl FlavourSteps for Store {
    async fn take(&self, req: &LockRequest, _side: Side, queue: bool) -> Result<Attempt> {
        self.locks.take(req, queue)
    }

    async fn leave(&self, req: &LockRequest, _side: Side) -> Result<()> {
        self.locks.leave(req)
    }

    async fn watch(&self, req: &LockRequest, _side: Side) -> Result<Wakeups> {
        self.locks.watch(&req.name, req.kind)
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leases().notifying().keeping(Kinds::ALL)
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        // A one-off attempt never joins a line (the flavours' waiter does).
        self.store.locks.take(req, false)
    }

    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<Option<Duration>> {
        self.store.locks.extend(req, token)
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        self.store.locks.release(req, token)
    }

    fn waiter(&self, req: &LockRequest) -> Option<Box<dyn Waiter>> {
        // The plain lock has no line: the core's waiter polls and wakes on `watch_free`.
        let side = Side::of(req.kind)?;
        let steps: Arc<dyn FlavourSteps> = self.store.clone();
        Some(Box::new(SqlFlavourWaiter::new(steps, req.clone(), side)))
    }

    async fn watch_free(&self, req: &LockRequest) -> Result<Wakeups> {
        self.store.locks.watch(&req.name, req.kind)
    }

    crate::backend::offers!(semaphores, elections, latches, inspection);
}

#[async_trait]
impl Semaphores for MemoryBackend {
    async fn count_permits(&self, req: &LockRequest) -> Result<PermitCount> {
        Ok(self.store.locks.count_permits(&req.name))
    }

    async fn set_permits(&self, name: &LockName, permits: u32) -> Result<Option<u32>> {
        Ok(self.store.locks.set_permits(name, permits))
    }
}

#[async_trait]
impl crate::backend::Elections for MemoryBackend {
    async fn elect_write(&self, write: ElectionWrite<'_>) -> Result<bool> {
        Ok(self
            .store
            .elections
            .write(write.election, write.term, write.value, write.ttl))
    }

    async fn elect_current(&self, election: &LockName) -> Result<Option<ElectionEntry>> {
        Ok(self.store.elections.current(election))
    }

    async fn elect_log(
        &self,
        election: &LockName,
        after: Option<u64>,
    ) -> Result<Vec<ElectionEntry>> {
        Ok(self.store.elections.log(election, after))
    }

    async fn watch_election(&self, election: &LockName) -> Result<Wakeups> {
        Ok(self.store.elections.watch(election))
    }
}

#[async_trait]
impl crate::backend::Latches for MemoryBackend {
    async fn latch_set(&self, latch: &LockName, count: u64) -> Result<bool> {
        Ok(self.store.latches.set(latch, count))
    }

    async fn latch_count_down(&self, latch: &LockName) -> Result<u64> {
        Ok(self.store.latches.count_down(latch))
    }

    async fn latch_count(&self, latch: &LockName) -> Result<u64> {
        Ok(self.store.latches.count(latch))
    }

    async fn watch_latch(&self, latch: &LockName) -> Result<Wakeups> {
        Ok(self.store.latches.watch(latch))
    }
}

#[async_trait]
impl Inspection for MemoryBackend {
    async fn status(&self, which: &Selection) -> Result<Vec<LockStatus>> {
        Ok(self.store.locks.status(which))
    }

    async fn force_release(&self, name: &LockName, kind: LockKind) -> Result<ForcedRelease> {
        let (removed, fence) = self.store.locks.force_release(name, kind)?;
        Ok(ForcedRelease::new(removed, fence))
    }
}

#[cfg(test)]
mod typed_tests {
    use super::*;

    #[tokio::test]
    async fn new_and_named_open_what_the_urls_open() -> Result<()> {
        let one = crate::Client::new(MemoryBackend::named("typed-shared")?);
        let two = crate::Client::new(MemoryBackend::named("typed-shared")?);
        let own = crate::Client::new(MemoryBackend::new());
        let by_url = crate::connect("memory://typed-shared").await?;
        let guard = one.lock("x").acquire().await?;
        assert!(
            two.lock("x").try_acquire().await?.is_none(),
            "the named store is shared"
        );
        assert!(
            by_url.lock("x").try_acquire().await?.is_none(),
            "and is the URL's store"
        );
        assert!(
            own.lock("x").try_acquire().await?.is_some(),
            "new() is a store of its own"
        );
        guard.release().await?;
        let bad = MemoryBackend::named("no spaces").unwrap_err();
        assert_eq!(bad.kind(), crate::ErrorKind::InvalidUrl);
        Ok(())
    }
}
