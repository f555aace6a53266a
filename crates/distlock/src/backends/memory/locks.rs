//! The locks of one in-memory store: its synchronizers (the plain lock, the fair lock, the read-write lock
//! and the semaphore of each name) and their atomic steps.
//!
//! Every step takes the store's mutex, reads and changes the state, and lets go without
//! awaiting anything in between: that is what makes each step atomic, as a transaction or a
//! script is in a real store. Leases and waiters' places end by tokio's clock
//! ([`tokio::time::Instant`]), so a test that pauses and advances time moves them.
//!
//! Who may take what is decided by the rules the SQL stores share
//! ([`flavour_rules::decide`]): this file only keeps the holdings, the line and the counters.
//! The plain lock is what those rules call a one-permit semaphore, in a family of its own
//! (`lock`), so that it never shares a holding or a fencing counter with a semaphore of the
//! same name.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use super::NAME;
use crate::backend::{Attempt, LockRequest, PermitCount, Wakeups};
use crate::backends::client_rules::flavour_rules::{
    self, Decision, Held, Outcome, Place, Shown, Side, WAITER_TTL_MS,
};
use crate::error::{Error, Result};
use crate::status::{Holder, Holding, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName};

/// The family of the plain lock (the flavours' are [`Side::family`]).
const LOCK_FAMILY: &str = "lock";

/// Which synchronizer: a family and a name.
type Key = (&'static str, String);

/// One holding, with its own lease.
struct Holds {
    side: Side,
    owner: String,
    token: u64,
    ends: Instant,
    since: SystemTime,
}

/// A waiter's place in line (fair-lock waiters, waiting writers).
struct InLine {
    owner: String,
    ends: Instant,
}

/// A plain lock, fair lock, read-write lock or semaphore of one name.
struct Synchronizer {
    holdings: Vec<Holds>,
    /// In arrival order.
    line: Vec<InLine>,
    /// A semaphore's size, kept from its first take.
    size: Option<u32>,
    /// The last fencing token drawn: kept for the store's life, so tokens of a name only grow.
    last_token: u64,
    /// Bumped by every change a waiter may be let in by.
    changed: watch::Sender<()>,
}

impl Synchronizer {
    fn new() -> Self {
        Synchronizer {
            holdings: Vec::new(),
            line: Vec::new(),
            size: None,
            last_token: 0,
            changed: watch::Sender::new(()),
        }
    }

    /// Drops the holdings whose lease ended and the places whose waiter stopped asking;
    /// answers whether a place lapsed (the next in line must be told).
    fn purge(&mut self, now: Instant) -> bool {
        self.holdings.retain(|h| h.ends > now);
        let before = self.line.len();
        self.line.retain(|p| p.ends > now);
        self.line.len() != before
    }

    /// The holdings and the line as the shared rules read them.
    fn judged(&self, now: Instant) -> (Vec<Held>, Vec<Place>) {
        let held = self
            .holdings
            .iter()
            .map(|h| Held {
                side: h.side,
                owner: h.owner.clone(),
                token: h.token as i64,
                left_ms: left_ms(h.ends, now),
            })
            .collect();
        let line = self
            .line
            .iter()
            .map(|p| Place {
                owner: p.owner.clone(),
                left_ms: left_ms(p.ends, now),
            })
            .collect();
        (held, line)
    }

    fn notify(&self) {
        self.changed.send_replace(());
    }

    fn next_token(&mut self) -> u64 {
        self.last_token += 1;
        self.last_token
    }

    fn find(&self, side: Side, owner: &str, token: Option<u64>) -> Option<usize> {
        self.holdings
            .iter()
            .position(|h| h.side == side && h.owner == owner && token.is_none_or(|t| t == h.token))
    }
}

/// Milliseconds from `now` to `end`, rounded up (a lease with 0.4 ms left is not over).
fn left_ms(end: Instant, now: Instant) -> i64 {
    let left = end.saturating_duration_since(now);
    i64::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i64::MAX)
}

/// The family and side `kind` is kept as.
fn place_of(kind: LockKind) -> Result<(&'static str, Side)> {
    match kind {
        LockKind::Mutex => Ok((LOCK_FAMILY, Side::Permit)),
        kind => Side::of(kind)
            .map(|side| (side.family(), side))
            .ok_or_else(|| Error::unsupported(NAME, kind)),
    }
}

/// The locks of one store.
#[derive(Default)]
pub(super) struct Locks(Mutex<HashMap<Key, Synchronizer>>);

/// The notices of a `watch` channel as a stream: one item per change after the subscription
/// (subscribing marks what was sent before as seen).
pub(super) fn notices(changes: watch::Receiver<()>) -> Wakeups {
    Box::pin(futures_util::stream::unfold(
        changes,
        |mut changes| async move {
            changes.changed().await.ok()?;
            Some(((), changes))
        },
    ))
}

impl Locks {
    fn state(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Synchronizer>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One take of `req`; with `queue`, a blocked fair waiter or writer keeps (or takes) its
    /// place in line.
    pub(super) fn take(&self, req: &LockRequest, queue: bool) -> Result<Attempt> {
        let (family, side) = place_of(req.kind)?;
        let owner = req.owner.as_str();
        let now = Instant::now();
        let mut state = self.state();
        let sync = state
            .entry((family, req.name.as_str().to_string()))
            .or_insert_with(Synchronizer::new);
        let lapsed = sync.purge(now);
        let size = match req.kind {
            LockKind::Mutex => 1,
            LockKind::Permit { permits } => {
                match flavour_rules::semaphore_size(
                    sync.size.map(i64::from),
                    permits,
                    req.follows_resize,
                ) {
                    Err(kept) => {
                        return flavour_rules::attempt(NAME, Outcome::SizeDiffers(kept), req);
                    }
                    // The first take sets the size, for everyone after.
                    Ok(size) => {
                        sync.size.get_or_insert(permits);
                        size
                    }
                }
            }
            _ => 0,
        };
        let (held, line) = sync.judged(now);
        let outcome = match flavour_rules::decide(side, owner, &held, &line, size, queue) {
            Decision::Keep(token) => {
                if let Some(i) = sync.find(side, owner, Some(token as u64)) {
                    sync.holdings[i].ends = now + req.lease.duration();
                }
                Outcome::Taken(token)
            }
            Decision::Take => {
                sync.line.retain(|p| p.owner != owner);
                let token = sync.next_token();
                sync.holdings.push(Holds {
                    side,
                    owner: owner.to_string(),
                    token,
                    ends: now + req.lease.duration(),
                    since: SystemTime::now(),
                });
                Outcome::Taken(token as i64)
            }
            Decision::Blocked { left_ms, join } => {
                if join {
                    let ends = now + Duration::from_millis(WAITER_TTL_MS as u64);
                    match sync.line.iter_mut().find(|p| p.owner == owner) {
                        Some(place) => place.ends = ends,
                        None => sync.line.push(InLine {
                            owner: owner.to_string(),
                            ends,
                        }),
                    }
                }
                if lapsed {
                    sync.notify();
                }
                Outcome::Held(left_ms)
            }
            Decision::Upgrade => Outcome::Upgrade,
        };
        flavour_rules::attempt(NAME, outcome, req)
    }

    /// Restarts the lease of the holding `token` if it is still `req.owner`'s.
    pub(super) fn extend(
        &self,
        req: &LockRequest,
        token: FencingToken,
    ) -> Result<Option<Duration>> {
        let (family, side) = place_of(req.kind)?;
        let now = Instant::now();
        let mut state = self.state();
        let Some(sync) = state.get_mut(&(family, req.name.as_str().to_string())) else {
            return Ok(None);
        };
        sync.purge(now);
        Ok(sync
            .find(side, req.owner.as_str(), Some(token.get()))
            .map(|i| {
                sync.holdings[i].ends = now + req.lease.duration();
                req.lease.duration()
            }))
    }

    /// Frees `req.owner`'s holding (the one `token` names, when given).
    pub(super) fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        let (family, side) = place_of(req.kind)?;
        let mut state = self.state();
        let Some(sync) = state.get_mut(&(family, req.name.as_str().to_string())) else {
            return Ok(false);
        };
        sync.purge(Instant::now());
        let Some(i) = sync.find(side, req.owner.as_str(), token.map(|t| t.get())) else {
            return Ok(false);
        };
        sync.holdings.remove(i);
        sync.notify();
        Ok(true)
    }

    /// A waiter gives up its place in line.
    pub(super) fn leave(&self, req: &LockRequest) -> Result<()> {
        let (family, _) = place_of(req.kind)?;
        let mut state = self.state();
        if let Some(sync) = state.get_mut(&(family, req.name.as_str().to_string())) {
            let before = sync.line.len();
            sync.line.retain(|p| p.owner != req.owner.as_str());
            if sync.line.len() != before {
                sync.notify();
            }
        }
        Ok(())
    }

    /// Starts listening for changes of `kind`'s synchronizer named `name`.
    pub(super) fn watch(&self, name: &LockName, kind: LockKind) -> Result<Wakeups> {
        let (family, _) = place_of(kind)?;
        let mut state = self.state();
        let sync = state
            .entry((family, name.as_str().to_string()))
            .or_insert_with(Synchronizer::new);
        Ok(notices(sync.changed.subscribe()))
    }

    /// A semaphore's kept size and the permits held now.
    pub(super) fn count_permits(&self, name: &LockName) -> PermitCount {
        let now = Instant::now();
        let state = self.state();
        let key = (Side::Permit.family(), name.as_str().to_string());
        match state.get(&key) {
            None => PermitCount {
                size: None,
                taken: 0,
            },
            Some(sync) => PermitCount {
                size: sync.size,
                taken: sync.holdings.iter().filter(|h| h.ends > now).count() as u32,
            },
        }
    }

    /// Sets a semaphore's size; answers the one it had.
    pub(super) fn set_permits(&self, name: &LockName, permits: u32) -> Option<u32> {
        let mut state = self.state();
        let sync = state
            .entry((Side::Permit.family(), name.as_str().to_string()))
            .or_insert_with(Synchronizer::new);
        let had = sync.size.replace(permits);
        sync.notify();
        had
    }

    /// Removes every holding of `kind`'s side of `name` and draws a token nobody will hold.
    pub(super) fn force_release(
        &self,
        name: &LockName,
        kind: LockKind,
    ) -> Result<(Vec<Holding>, FencingToken)> {
        let (family, side) = place_of(kind)?;
        let now = Instant::now();
        let mut state = self.state();
        let sync = state
            .entry((family, name.as_str().to_string()))
            .or_insert_with(Synchronizer::new);
        sync.purge(now);
        let (removed, kept) = std::mem::take(&mut sync.holdings)
            .into_iter()
            .partition(|h| h.side == side);
        sync.holdings = kept;
        let removed = removed.iter().map(|h| shown(h, now)).collect();
        let fence = FencingToken(sync.next_token());
        sync.notify();
        Ok((removed, fence))
    }

    /// The live holdings and waiters of the synchronizers `which` selects.
    pub(super) fn status(&self, which: &Selection) -> Vec<LockStatus> {
        let now = Instant::now();
        let state = self.state();
        let mut selected: Vec<(&Key, &Synchronizer)> = state
            .iter()
            .filter(|((_, name), _)| which.matches(name))
            .collect();
        selected.sort_by(|((fa, a), _), ((fb, b), _)| (a, fa).cmp(&(b, fb)));
        let mut found = Vec::new();
        let mut flavours = Vec::new();
        let mut waiters = Vec::new();
        for ((family, name), sync) in selected {
            let mut live: Vec<&Holds> = sync.holdings.iter().filter(|h| h.ends > now).collect();
            if live.is_empty() && sync.line.iter().all(|p| p.ends <= now) {
                continue;
            }
            if *family == LOCK_FAMILY {
                let mut status = LockStatus::new(name.clone(), LockKind::Mutex);
                status.last_token = Some(FencingToken(sync.last_token));
                status.holdings = live.iter().map(|h| shown(h, now)).collect();
                found.push(status);
                continue;
            }
            // The rules' status groups holdings by name and side, in that order.
            live.sort_by_key(|h| h.side.column());
            flavours.extend(live.into_iter().map(|h| Shown {
                side: h.side,
                name: name.clone(),
                holding: shown(h, now),
                last_token: Some(sync.last_token as i64),
                permits: sync.size.unwrap_or(0),
            }));
            let in_line = sync.line.iter().filter(|p| p.ends > now).count();
            if in_line > 0 {
                waiters.push((name.clone(), family.to_string(), in_line as i64));
            }
        }
        found.extend(flavour_rules::statuses(flavours, waiters));
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found
    }
}

/// A holding as status and forced release show it.
fn shown(h: &Holds, now: Instant) -> Holding {
    let since_ms = h
        .since
        .duration_since(SystemTime::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as i64);
    Holding::new(FencingToken(h.token))
        .holder_record(Some(Holder::this_process_record()))
        .since_unix_ms(since_ms)
        .lease_left_ms(left_ms(h.ends, now))
}
