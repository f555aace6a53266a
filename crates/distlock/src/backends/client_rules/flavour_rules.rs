//! The rules of the fair lock, the read-write lock and the semaphore, shared by the SQL
//! backends (PostgreSQL and MySQL/MariaDB), which lock the synchronizer's row, read its live
//! holdings and waiters, decide here, then write, all in one transaction (the SQLite backend
//! applies the same rules in its writer op, `sqlite/flavours.rs`; the in-memory backend under its
//! mutex, `memory/locks.rs`; Redis in its scripts).
//!
//! * fair lock: one holder; while it is free, only the first waiter in line (arrival order) may
//!   take it, or anyone when nobody waits. A one-off attempt (`try_acquire`) never joins the
//!   line.
//! * read-write lock: any number of readers or one writer; the writer may take the read side
//!   too. Writer preference: while another owner waits for the write side, new readers wait,
//!   so a stream of readers cannot starve writers. A reader asking for the write side is
//!   refused (upgrading could deadlock two readers).
//! * semaphore: at most `size` holdings, the size kept with the semaphore from its first take.
//!
//! Every "blocked" answer of a side whose waiters keep a place in line is at most a third of a
//! place's life ([`WAITER_TTL_MS`]), so a live waiter asks again, and keeps its place, well
//! before it lapses; a crashed waiter's place lapses and holds nobody up longer than that.

use crate::backend::{Attempt, LockRequest, permits_differ, upgrade_refused};
use crate::error::Result;
use crate::status::{Holding, LockStatus};
use crate::types::{FencingToken, LockKind};

/// How long a waiter's place lasts without the waiter asking again: the longest a crashed
/// waiter holds up the ones behind it.
pub(crate) const WAITER_TTL_MS: i64 = 6_000;

/// Which holding of which synchronizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Fair,
    Read,
    Write,
    Permit,
}

impl Side {
    /// The side a flavour holds; `None` for the plain lock (a table of its own).
    pub(crate) fn of(kind: LockKind) -> Option<Side> {
        match kind {
            LockKind::Fair => Some(Side::Fair),
            LockKind::Read => Some(Side::Read),
            LockKind::Write => Some(Side::Write),
            LockKind::Permit { .. } => Some(Side::Permit),
            _ => None,
        }
    }

    /// The synchronizer the side belongs to (the tables' `family`): both sides of a read-write
    /// lock share one, with one fencing counter.
    pub(crate) fn family(self) -> &'static str {
        match self {
            Side::Fair => "fair",
            Side::Read | Side::Write => "rw",
            Side::Permit => "sem",
        }
    }

    /// The side as the tables store it.
    pub(crate) fn column(self) -> &'static str {
        match self {
            Side::Fair => "fair",
            Side::Read => "read",
            Side::Write => "write",
            Side::Permit => "permit",
        }
    }

    // The in-memory store keeps sides as they are, not as text.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
        allow(dead_code)
    )]
    pub(crate) fn from_column(side: &str) -> Option<Side> {
        match side {
            "fair" => Some(Side::Fair),
            "read" => Some(Side::Read),
            "write" => Some(Side::Write),
            "permit" => Some(Side::Permit),
            _ => None,
        }
    }

    /// The flavour of the side, as status shows it (a semaphore with its kept size).
    pub(crate) fn kind(self, permits: u32) -> LockKind {
        match self {
            Side::Fair => LockKind::Fair,
            Side::Read => LockKind::Read,
            Side::Write => LockKind::Write,
            Side::Permit => LockKind::Permit { permits },
        }
    }

    /// Whether the side's waiters keep a place in line in the store.
    pub(crate) fn queues(self) -> bool {
        matches!(self, Side::Fair | Side::Write)
    }

    /// The flavour a line of waiters of `family` waits for (status shows it with the count).
    pub(crate) fn waiting_kind(family: &str) -> LockKind {
        if family == Side::Fair.family() {
            LockKind::Fair
        } else {
            LockKind::Write
        }
    }
}

#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "memory")),
    allow(dead_code)
)]
/// A live holding of the synchronizer.
#[derive(Clone, Debug)]
pub(crate) struct Held {
    pub(crate) side: Side,
    pub(crate) owner: String,
    pub(crate) token: i64,
    /// How long its lease has left.
    pub(crate) left_ms: i64,
}

#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "memory")),
    allow(dead_code)
)]
/// A live place in line (the line is in arrival order).
#[derive(Clone, Debug)]
pub(crate) struct Place {
    pub(crate) owner: String,
    /// How long the place lasts unless its waiter asks again.
    pub(crate) left_ms: i64,
}

#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "memory")),
    allow(dead_code)
)]
/// What a take does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The owner's own holding, with this token: restart its lease.
    Keep(i64),
    /// Take a new holding (and leave the line, if in it).
    Take,
    /// Blocked: ask again in `left_ms` at the latest; `join`: keep (or take) a place in line.
    Blocked { left_ms: i64, join: bool },
    /// A reader asked for the write side.
    Upgrade,
}

#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "memory")),
    allow(dead_code)
)]
/// The take of `side` by `owner`, given the synchronizer's live holdings and line and a
/// semaphore's `size`; `queue` when the caller is a waiter that keeps a place in line.
pub(crate) fn decide(
    side: Side,
    owner: &str,
    holdings: &[Held],
    line: &[Place],
    size: i64,
    queue: bool,
) -> Decision {
    let own = |s: Side| {
        holdings
            .iter()
            .find(|h| h.side == s && h.owner == owner)
            .map(|h| h.token)
    };
    // The first lease of another owner's holding of `s` to end, if any.
    let others = |s: Side| {
        holdings
            .iter()
            .filter(move |h| h.side == s && h.owner != owner)
            .map(|h| h.left_ms)
    };
    if let Some(token) = own(side) {
        return Decision::Keep(token);
    }
    let blocked = match side {
        Side::Fair => others(Side::Fair).min().or_else(|| {
            line.first()
                .filter(|head| head.owner != owner)
                .map(|head| head.left_ms)
        }),
        Side::Read => match others(Side::Write).min() {
            Some(left) => Some(left),
            None if own(Side::Write).is_some() => None,
            None => line
                .iter()
                .filter(|place| place.owner != owner)
                .map(|place| place.left_ms)
                .min(),
        },
        Side::Write => {
            if own(Side::Read).is_some() {
                return Decision::Upgrade;
            }
            others(Side::Write).chain(others(Side::Read)).min()
        }
        Side::Permit => {
            let held = others(Side::Permit).count() as i64;
            (held >= size).then(|| others(Side::Permit).min()).flatten()
        }
    };
    match blocked {
        None => Decision::Take,
        Some(left_ms) => {
            let mut left_ms = left_ms.max(1);
            if side.queues() {
                left_ms = left_ms.min(WAITER_TTL_MS / 3);
            }
            Decision::Blocked {
                left_ms,
                join: side.queues() && queue,
            }
        }
    }
}

/// A synchronizer as a read without locks shows it (the SQL stores' "peek" before a take).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
#[derive(Debug, Default)]
pub(crate) struct Peek {
    pub(crate) holdings: Vec<Held>,
    pub(crate) line: Vec<Place>,
    /// Whether the synchronizer's row exists, and a semaphore's kept size.
    pub(crate) row: Option<Option<i64>>,
}

#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
impl Peek {
    /// The answer a take can give from the peek alone, without its locking transaction: "held",
    /// when the rules say blocked and the take would write nothing (no place in line to join or
    /// keep alive: a waiter's own place still has more than half its life). Anything else
    /// (a take, a keep, a place to write, a size to check) goes to the locked step.
    pub(crate) fn blocked(&self, req: &LockRequest, side: Side, queue: bool) -> Option<i64> {
        let owner = req.owner.as_str();
        let size = match side {
            Side::Permit => {
                let kept = self.row??;
                semaphore_size(Some(kept), asked_permits(req), req.follows_resize).ok()?
            }
            _ => 0,
        };
        match decide(side, owner, &self.holdings, &self.line, size, queue) {
            Decision::Blocked { left_ms, join } => {
                let placed = || {
                    self.line
                        .iter()
                        .any(|p| p.owner == owner && p.left_ms > WAITER_TTL_MS / 2)
                };
                (!join || placed()).then_some(left_ms)
            }
            _ => None,
        }
    }

    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    /// Whether a waiter in line of `req` could take now (a watcher of a store that cannot
    /// notify wakes only those): for a fair lock, the head of the line once it is free.
    pub(crate) fn lets_in(&self, req: &LockRequest, side: Side) -> bool {
        let size = match (side, self.row) {
            (Side::Permit, Some(Some(kept))) => kept,
            (Side::Permit, _) => i64::from(asked_permits(req)),
            _ => 0,
        };
        let owner = req.owner.as_str();
        !matches!(
            decide(side, owner, &self.holdings, &self.line, size, true),
            Decision::Blocked { .. }
        )
    }

    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    /// A digest of the holdings, the line and the size, without the times left (which change
    /// at every read): it changes whenever a take might answer differently.
    pub(crate) fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        for held in &self.holdings {
            (held.side.column(), &held.owner, held.token).hash(&mut hasher);
        }
        for place in &self.line {
            place.owner.hash(&mut hasher);
        }
        self.row.hash(&mut hasher);
        hasher.finish()
    }
}

/// What one take answered the caller.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Held now, with this token.
    Taken(i64),
    /// Blocked, for `left_ms` at the latest.
    Held(i64),
    /// The semaphore keeps this size, not the one asked.
    SizeDiffers(i64),
    /// A reader asked for the write side.
    Upgrade,
}

#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "memory")),
    allow(dead_code)
)]
/// The size a semaphore take goes by: `Ok(size)` or the size kept that differs from the one
/// asked (the caller answers [`Outcome::SizeDiffers`]). `kept` is `None` on first use.
pub(crate) fn semaphore_size(
    kept: Option<i64>,
    asked: u32,
    follows_resize: bool,
) -> std::result::Result<i64, i64> {
    match kept {
        Some(kept) if kept != i64::from(asked) && !follows_resize => Err(kept),
        Some(kept) => Ok(kept),
        None => Ok(i64::from(asked)),
    }
}

/// The permits `req` asks for (0 for another flavour).
pub(crate) fn asked_permits(req: &LockRequest) -> u32 {
    match req.kind {
        LockKind::Permit { permits } => permits,
        _ => 0,
    }
}

/// The attempt an outcome stands for, or the caller's typed error.
pub(crate) fn attempt(
    backend: &'static str,
    outcome: Outcome,
    req: &LockRequest,
) -> Result<Attempt> {
    match outcome {
        Outcome::Taken(token) => Ok(Attempt::leased(FencingToken(token.max(0) as u64), req)),
        Outcome::Held(left_ms) => Ok(Attempt::Held {
            retry_after: Some(std::time::Duration::from_millis(left_ms.max(1) as u64)),
        }),
        Outcome::SizeDiffers(kept) => Err(permits_differ(
            backend,
            &req.name,
            u32::try_from(kept).unwrap_or(u32::MAX),
            asked_permits(req),
        )),
        Outcome::Upgrade => Err(upgrade_refused(backend, &req.name)),
    }
}

/// One live holding as a status shows it.
pub(crate) struct Shown {
    pub(crate) side: Side,
    pub(crate) name: String,
    pub(crate) holding: Holding,
    /// The synchronizer's last fencing token.
    pub(crate) last_token: Option<i64>,
    /// A semaphore's kept size (0 if unknown).
    pub(crate) permits: u32,
}

/// The status entries of the fair locks, read-write locks and semaphores found: one per name
/// and side held (`shown` comes ordered by name and side), and one per name and flavour waited
/// for (`waiters`: name, family, count of fair-lock waiters or waiting writers).
pub(crate) fn statuses(shown: Vec<Shown>, waiters: Vec<(String, String, i64)>) -> Vec<LockStatus> {
    let mut found: Vec<LockStatus> = Vec::new();
    for row in shown {
        let kind = row.side.kind(row.permits);
        let same = found
            .last()
            .is_some_and(|last| last.name == row.name && last.kind == kind);
        if !same {
            let mut status = LockStatus::new(row.name.clone(), kind);
            status.last_token = row.last_token.map(|t| FencingToken(t.max(0) as u64));
            found.push(status);
        }
        if let Some(last) = found.last_mut() {
            last.holdings.push(row.holding);
        }
    }
    for (name, family, count) in waiters {
        let kind = Side::waiting_kind(&family);
        let count = u64::try_from(count).unwrap_or(0);
        match found.iter_mut().find(|s| s.name == name && s.kind == kind) {
            Some(status) => status.waiters = Some(count),
            None => {
                let mut status = LockStatus::new(name, kind);
                status.waiters = Some(count);
                found.push(status);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(side: Side, owner: &str, token: i64, left_ms: i64) -> Held {
        Held {
            side,
            owner: owner.into(),
            token,
            left_ms,
        }
    }

    fn place(owner: &str, left_ms: i64) -> Place {
        Place {
            owner: owner.into(),
            left_ms,
        }
    }

    #[test]
    fn fair_lock_serves_the_head_of_the_line() {
        assert_eq!(decide(Side::Fair, "a", &[], &[], 0, false), Decision::Take);
        let line = [place("b", 5000), place("a", 5000)];
        assert_eq!(
            decide(Side::Fair, "a", &[], &line, 0, true),
            Decision::Blocked {
                left_ms: 2000,
                join: true
            }
        );
        assert_eq!(decide(Side::Fair, "b", &[], &line, 0, true), Decision::Take);
        // A one-off attempt does not jump the line, nor join it.
        assert_eq!(
            decide(Side::Fair, "c", &[], &line, 0, false),
            Decision::Blocked {
                left_ms: 2000,
                join: false
            }
        );
        let holding = [held(Side::Fair, "b", 7, 30_000)];
        assert_eq!(
            decide(Side::Fair, "b", &holding, &line, 0, true),
            Decision::Keep(7)
        );
    }

    #[test]
    fn readers_share_writers_exclude_and_waiting_writers_hold_readers_back() {
        let readers = [
            held(Side::Read, "r1", 1, 900),
            held(Side::Read, "r2", 2, 500),
        ];
        assert_eq!(
            decide(Side::Read, "r3", &readers, &[], 0, false),
            Decision::Take
        );
        assert_eq!(
            decide(Side::Write, "w", &readers, &[], 0, true),
            Decision::Blocked {
                left_ms: 500,
                join: true
            }
        );
        let waiting = [place("w", 4000)];
        assert_eq!(
            decide(Side::Read, "r3", &readers, &waiting, 0, false),
            Decision::Blocked {
                left_ms: 4000,
                join: false
            }
        );
        assert_eq!(
            decide(Side::Write, "r1", &readers, &[], 0, false),
            Decision::Upgrade
        );
        let writer = [held(Side::Write, "w", 3, 800)];
        assert_eq!(
            decide(Side::Read, "w", &writer, &[], 0, false),
            Decision::Take,
            "the writer takes the read side too"
        );
        assert_eq!(
            decide(Side::Read, "r", &writer, &[], 0, false),
            Decision::Blocked {
                left_ms: 800,
                join: false
            }
        );
    }

    #[test]
    fn semaphores_count_to_their_size() {
        let two = [
            held(Side::Permit, "a", 1, 300),
            held(Side::Permit, "b", 2, 200),
        ];
        assert_eq!(
            decide(Side::Permit, "c", &two, &[], 3, false),
            Decision::Take
        );
        assert_eq!(
            decide(Side::Permit, "c", &two, &[], 2, false),
            Decision::Blocked {
                left_ms: 200,
                join: false
            }
        );
        assert_eq!(semaphore_size(None, 3, false), Ok(3));
        assert_eq!(semaphore_size(Some(2), 3, false), Err(2));
        assert_eq!(semaphore_size(Some(2), 3, true), Ok(2));
    }
}
