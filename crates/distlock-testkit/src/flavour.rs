//! The lock flavours a test runs with, and how a lock gets a lease its store keeps: shared by
//! the suite and the child processes it spawns (each side imports this, neither the other).

use std::time::Duration;

use distlock::{Client, Lock};

/// A lock flavour under test: how to make the lock from a client and a name.
#[derive(Clone)]
pub struct Flavour {
    /// Short name, the first part of each test name (`mutex`, `fair`, `semaphore1`, …).
    pub name: &'static str,
    /// Makes the lock under test.
    pub make: fn(&Client, &str) -> Lock,
    /// Whether two holders of this flavour exclude each other. When false (the read side of a
    /// read-write lock), cases that need a second holder use `contender` instead.
    pub self_exclusive: bool,
    /// Makes the lock a competing holder takes (the write side, for readers).
    pub contender: fn(&Client, &str) -> Lock,
}

impl Flavour {
    /// The exclusive lock, `client.lock(name)`.
    pub fn mutex() -> Self {
        Flavour {
            name: "mutex",
            make: |c, n| c.lock(n),
            self_exclusive: true,
            contender: |c, n| c.lock(n),
        }
    }

    /// Every flavour distlock has, for a store that supports them all: the lock, the fair lock,
    /// each side of the read-write lock (readers compete with the write side) and a one-permit
    /// semaphore.
    pub fn every() -> Vec<Self> {
        vec![
            Flavour::mutex(),
            Flavour {
                name: "fair",
                make: |c, n| c.fair_lock(n),
                self_exclusive: true,
                contender: |c, n| c.fair_lock(n),
            },
            Flavour {
                name: "write",
                make: |c, n| c.rw_lock(n).write(),
                self_exclusive: true,
                contender: |c, n| c.rw_lock(n).write(),
            },
            Flavour {
                name: "read",
                make: |c, n| c.rw_lock(n).read(),
                self_exclusive: false,
                contender: |c, n| c.rw_lock(n).write(),
            },
            Flavour {
                name: SEMAPHORE,
                make: |c, n| c.semaphore(n, 1),
                self_exclusive: true,
                contender: |c, n| c.semaphore(n, 1),
            },
        ]
    }
}

/// The name of the one-permit semaphore flavour of [`Flavour::every`].
pub(crate) const SEMAPHORE: &str = "semaphore1";

/// `lock` (of `client`) with a lease of about `wanted` that the store keeps
/// ([`Client::keepable_lease`]), or as it is on a store that keeps none.
pub fn with_lease(client: &Client, lock: Lock, wanted: Duration) -> Lock {
    match client.keepable_lease(wanted) {
        Some(lease) => lock.lease(lease),
        None => lock,
    }
}

/// Every kind of lock, a semaphore of `permits` among them.
pub fn every_lock_kind(permits: u32) -> [distlock::LockKind; 5] {
    use distlock::LockKind;
    [
        LockKind::Mutex,
        LockKind::Fair,
        LockKind::Read,
        LockKind::Write,
        LockKind::Permit { permits },
    ]
}
