//! What a store says of its lock, as data the core reads: how a holding is kept alive
//! ([`LeaseModel`]), whether waiters are notified, queue, or are handed the lock, and which
//! flavours it keeps ([`Kinds`]). Every store fills one [`Capabilities`] in
//! [`Backend::capabilities`](super::Backend::capabilities); the core refuses a flavour outside
//! its `kinds` here ([`Capabilities::admit`]), so no store writes that refusal.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::types::LockKind;

/// How a store keeps a holding alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseModel {
    /// Each lock has its own lease, renewed by the core's watchdog; `granularity` is the
    /// smallest step the store can keep (leases shorter than it are refused).
    PerLock {
        /// The store's lease resolution.
        granularity: Duration,
    },
    /// A holding lasts as long as the client's session with the store; nothing is renewed per
    /// lock. The core keeps a lease meaning what it means on every store — a holder that stops
    /// (crashed, paused, no watchdog) blocks others at most that long — by refusing
    /// ([`crate::ErrorKind::InvalidLease`]) a lease set shorter than `expires_after` (unless the
    /// store holds such a lease under a session of its own: [`Capabilities::short_leases`]), and
    /// every lease set (and [`crate::Lock::no_watchdog`]) when there is no `expires_after`.
    Session {
        /// How long after its holder's last contact the store ends a session (a ZooKeeper
        /// session timeout, an etcd lease's TTL): how long a crashed or paused holder keeps its
        /// locks. `None` for a session that is its connection, which a paused holder keeps
        /// open: nothing bounds a stopped holder by time.
        expires_after: Option<Duration>,
        /// For the error refusing a lease: what sets `expires_after` and how to change it, or,
        /// without one, why no lease can be kept and what to use instead (one clause).
        explain: &'static str,
    },
}

/// A set of lock flavours ([`LockKind`]s, a semaphore whatever its size).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Kinds(u8);

impl Kinds {
    /// The exclusive lock alone: what a store keeps unless it says more.
    pub const MUTEX: Kinds = Kinds(1);
    /// Every flavour: the exclusive lock, the fair lock, both sides of the read-write lock and
    /// the semaphore.
    pub const ALL: Kinds = Kinds(0b1_1111);

    /// Whether `kind` is in the set.
    pub fn contains(self, kind: LockKind) -> bool {
        self.0 & Self::bit(kind) != 0
    }

    fn bit(kind: LockKind) -> u8 {
        match kind {
            LockKind::Mutex => 1,
            LockKind::Fair => 1 << 1,
            LockKind::Read => 1 << 2,
            LockKind::Write => 1 << 3,
            LockKind::Permit { .. } => 1 << 4,
        }
    }
}

impl std::fmt::Debug for Kinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds = [
            LockKind::Mutex,
            LockKind::Fair,
            LockKind::Read,
            LockKind::Write,
            LockKind::Permit { permits: 0 },
        ];
        let names = kinds.into_iter().filter(|k| self.contains(*k));
        f.debug_set()
            .entries(names.map(LockKind::short_name))
            .finish()
    }
}

/// What a backend's lock is like, so the core can refuse early and choose how to wait, and the
/// conformance suite can tell which cases apply. What a store offers beyond the lock is not
/// here: [`Backend`](super::Backend)'s accessors answer it.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Capabilities {
    /// The store tells waiters when a lock may be free
    /// ([`Backend::watch_free`](super::Backend::watch_free) or the backend's
    /// [`Waiter::changed`](super::Waiter::changed) is meaningful); without it the core waits
    /// with a jittered backoff bounded by the holder's lease left.
    pub notifies: bool,
    /// How holdings are kept alive.
    pub lease: LeaseModel,
    /// Waiters hold a place in a queue in the store, which their
    /// [`Waiter::leave`](super::Waiter::leave) must clear.
    pub queues: bool,
    /// A release hands the lock to a waiter of the same client itself (the backend's
    /// [`Waiter`](super::Waiter)), so the core does not also wake one of them to try again.
    pub hands_over: bool,
    /// The flavours the store keeps. The core refuses the others ([`Capabilities::admit`])
    /// before any call reaches the store, so a backend is never asked for one of them.
    pub kinds: Kinds,
    /// For the refusal of a flavour outside `kinds`: what the message adds after "does not
    /// support fair locks", where another configuration of the store has it (e.g. "with
    /// ?lock=session (…); use ?lock=lease, …"); empty when none does.
    pub refusal_hint: &'static str,
    /// On a session store ([`LeaseModel::Session`] with an expiry): a lease shorter than the
    /// sessions' expiry is held under a session (or store lease) of its own that ends that
    /// long after its holder stops, instead of being refused. `None`: such a lease is refused.
    pub short_leases: Option<ShortLeases>,
    /// For a store with no clock that ends a lease (an object store): waiters judge a holding
    /// ended by their own monotonic clocks, once they have seen it unchanged for its lease and
    /// this many thousandths of it more, the difference in clock rate tolerated between a
    /// holder and a waiter. A stopped holder's lock is then free after its lease, this margin
    /// ([`Capabilities::drift_margin`]) and the granularity. 0 where the store's own clock ends
    /// leases.
    pub drift_per_mille: u32,
}

/// How a session store keeps a lease shorter than its sessions' expiry: under a session (or
/// store lease) of its own, whose expiry is the lease ([`Capabilities::short_leases`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShortLeases {
    /// The step such a session's expiry is rounded up to (etcd: whole seconds).
    pub granularity: Duration,
    /// The shortest the server keeps (it raises a shorter expiry to it): shorter leases are
    /// refused, naming it and `why`.
    pub minimum: Duration,
    /// For that refusal: what sets the server's minimum and how to lower it (one clause).
    pub why: &'static str,
}

impl Capabilities {
    /// A store with per-lock leases of millisecond resolution that neither notifies nor
    /// queues, keeping the exclusive lock alone.
    pub fn leases() -> Self {
        Capabilities {
            notifies: false,
            lease: LeaseModel::PerLock {
                granularity: Duration::from_millis(1),
            },
            queues: false,
            hands_over: false,
            kinds: Kinds::MUTEX,
            refusal_hint: "",
            short_leases: None,
            drift_per_mille: 0,
        }
    }

    /// A store whose holdings are sessions, that neither notifies nor queues: sessions the
    /// store ends `expires_after` their holder's last contact, or (`None`) with their
    /// connection. `explain` is [`LeaseModel::Session`]'s.
    pub fn sessions(expires_after: Option<Duration>, explain: &'static str) -> Self {
        Capabilities {
            lease: LeaseModel::Session {
                expires_after,
                explain,
            },
            ..Self::leases()
        }
    }

    /// The same, with notifications.
    pub fn notifying(self) -> Self {
        Capabilities {
            notifies: true,
            ..self
        }
    }

    /// The same, with releases handing the lock to this client's waiters themselves.
    pub fn handing_over(self) -> Self {
        Capabilities {
            hands_over: true,
            ..self
        }
    }

    /// The same, with waiters queueing in the store.
    pub fn queueing(self) -> Self {
        Capabilities {
            queues: true,
            ..self
        }
    }

    /// The same, with lease resolution `granularity`.
    pub fn granularity(self, granularity: Duration) -> Self {
        Capabilities {
            lease: LeaseModel::PerLock { granularity },
            ..self
        }
    }

    /// The same, holding a lease shorter than the sessions' expiry under a session of its own
    /// (see [`short_leases`](Capabilities::short_leases)): in steps of `granularity`, from the
    /// server's `minimum`, which `why` explains.
    pub fn keeping_short_leases(
        self,
        granularity: Duration,
        minimum: Duration,
        why: &'static str,
    ) -> Self {
        Capabilities {
            short_leases: Some(ShortLeases {
                granularity,
                minimum,
                why,
            }),
            ..self
        }
    }

    /// The same, keeping the flavours `kinds`.
    pub fn keeping(self, kinds: Kinds) -> Self {
        Capabilities { kinds, ..self }
    }

    /// The same, with `hint` in the refusal of a flavour it lacks (see
    /// [`refusal_hint`](Capabilities::refusal_hint)).
    pub fn refusing_with(self, hint: &'static str) -> Self {
        Capabilities {
            refusal_hint: hint,
            ..self
        }
    }

    /// The same, with leases judged by waiters' clocks, tolerating `drift_per_mille`
    /// thousandths of a lease of clock-rate difference (see
    /// [`drift_per_mille`](Capabilities::drift_per_mille)).
    pub fn judged_by_waiters(self, drift_per_mille: u32) -> Self {
        Capabilities {
            drift_per_mille,
            ..self
        }
    }

    /// How much longer than `lease` a stopped holder's lock stays taken beyond the store's
    /// granularity: the drift allowance of a store whose waiters judge leases, zero elsewhere.
    pub fn drift_margin(&self, lease: Duration) -> Duration {
        lease * self.drift_per_mille / 1000
    }

    /// Whether holdings are leases the watchdog renews.
    pub fn renews(&self) -> bool {
        matches!(self.lease, LeaseModel::PerLock { .. })
    }

    /// `Ok` if the store of `backend` keeps `kind`; otherwise the one refusal every store
    /// answers for a flavour it lacks ([`crate::ErrorKind::Unsupported`]), naming the backend,
    /// the flavour and the [`refusal_hint`](Capabilities::refusal_hint).
    pub fn admit(&self, backend: &'static str, kind: LockKind) -> Result<()> {
        if self.kinds.contains(kind) {
            return Ok(());
        }
        Err(match self.refusal_hint {
            "" => Error::unsupported(backend, kind),
            hint => Error::unsupported(backend, format!("{kind} {hint}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_hold_what_they_name() {
        let every = [
            LockKind::Mutex,
            LockKind::Fair,
            LockKind::Read,
            LockKind::Write,
            LockKind::Permit { permits: 3 },
        ];
        assert!(every.iter().all(|k| Kinds::ALL.contains(*k)));
        assert!(Kinds::MUTEX.contains(LockKind::Mutex));
        assert!(every[1..].iter().all(|k| !Kinds::MUTEX.contains(*k)));
        assert_eq!(format!("{:?}", Kinds::MUTEX), r#"{"lock"}"#);
    }

    #[test]
    fn the_refusal_names_the_flavour_and_the_hint() {
        let plain = Capabilities::leases();
        assert!(plain.admit("x", LockKind::Mutex).is_ok());
        let e = plain.admit("x", LockKind::Fair).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Unsupported);
        assert_eq!(e.message(), "the x backend does not support fair locks");
        let hinted = plain.refusing_with("with ?lock=session; use ?lock=lease");
        let e = hinted.admit("x", LockKind::Read).unwrap_err();
        assert_eq!(
            e.message(),
            "the x backend does not support read locks with ?lock=session; use ?lock=lease"
        );
    }
}
