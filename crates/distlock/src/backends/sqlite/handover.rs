//! Hand-over: what the writer thread and the tasks of one client share about the locks this
//! client holds and the waiters it has parked.
//!
//! A waiter of this client that found a lock held parks here once its take is answered (a take
//! gives up the taker's place first, in the writer, so no grant can cross it). A take of a lock
//! this client holds for another owner is answered "held" from here, without the writer. A
//! release of the lock by its holder then hands it to the first parked waiter, one of two ways:
//!
//! * **in memory**, in the releasing task ([`Local::hand_over`]): no write, no hop to the writer
//!   thread, the waiter's task woken straight from the releaser's. The file's row goes on naming
//!   the holding this client took; the new holder gets the next of the fencing tokens that take
//!   reserved ([`RESERVED`]) and what is left of the row's lease. The file learns of the new
//!   holder at the next write about the lock in this client (a renewal, the release, a take, a
//!   status): the writer first moves the row to the holding of now, in that write's transaction
//!   ([`Local::moved`]);
//! * **in the release's transaction**, by the writer, when memory cannot: the row's lease has
//!   less than half the waiter's lease left, or the reserved tokens are used up. That take draws a
//!   new token, reserves more, and starts a full lease.
//!
//! Why the in-memory way is as safe as a write:
//! * exclusion: the row stays in the file, live, until its lease ends by the clock every process
//!   judges leases by (CLOCK_BOOTTIME), so no other process can take the lock; a hand-over in
//!   memory is made only while the row has at least half a lease left, and the new holder is given
//!   only what the row has left, so it counts itself lost no later than the row ends. Inside
//!   this client, every write about the lock first moves the row to the holder of now, so a
//!   previous holder's release or renewal finds nothing;
//! * fencing: the take that made the row set the name's counter to its token + [`RESERVED`],
//!   so the tokens handed out in memory are above the take's and below every later take's, in
//!   any process;
//! * a holder that lost the row (paused past its lease, or a forced release) learns at its next
//!   renewal, as any holder does; the move finds no row, and the client forgets the lock.
//!
//! Either way, at most [`MAX_HANDOVERS`] in a row per lock: the release after that frees it, so
//! waiters in other processes get their turn.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::clock;

/// The most times in a row a lock is handed to a waiter of this client; the release after that
/// frees it, so waiters in other processes get their turn.
pub(super) const MAX_HANDOVERS: u32 = 16;

/// Fencing tokens a take reserves after its own, for the holders it hands over to in memory.
pub(super) const RESERVED: i64 = MAX_HANDOVERS as i64;

/// Past this many locks remembered, those whose lease ended are forgotten at the next take.
const PRUNE_ABOVE: usize = 4096;

/// A lock handed to a parked waiter: its fencing token, and how long its lease has left,
/// counted from `at`.
#[derive(Debug)]
pub(super) struct Grant {
    pub(super) token: i64,
    pub(super) at: Instant,
    pub(super) lease_ms: i64,
}

/// A parked waiter.
pub(super) struct Parked {
    pub(super) owner: String,
    pub(super) lease_ms: i64,
    pub(super) grant: oneshot::Sender<Grant>,
}

/// A holding: owner token and fencing token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Holding {
    pub(super) owner: String,
    pub(super) token: i64,
}

/// A lock this client holds, as its writer last wrote it and as it is now.
struct Held {
    /// The holding the file's row names: what a write matches.
    row: Holding,
    /// The holding now: another than `row` after a hand-over in memory.
    now: Holding,
    /// When the row's lease ends (CLOCK_BOOTTIME, ms).
    expires_ms: i64,
    /// The last token the row's take reserved.
    reserved: i64,
    /// The release counter of the lock's slot in the sidecar when the row was taken: a forced
    /// release (by any process) bumps it, and hand-overs in memory stop.
    notices: u64,
}

/// Shared by the writer thread and the client's tasks, behind a mutex held only for map
/// lookups and channel sends.
#[derive(Default)]
pub(super) struct Local {
    /// Waiters of this client, by lock name, in the order they parked.
    parked: HashMap<String, VecDeque<Parked>>,
    /// Hand-overs in a row, by lock name.
    streaks: HashMap<String, u32>,
    /// The locks this client took, by name.
    held: HashMap<String, Held>,
    /// Locks a parked waiter of this client is asking the file about now ([`Turn`]).
    asking: HashSet<String>,
}

impl std::fmt::Debug for Local {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Local")
            .field("parked", &self.parked.len())
            .field("held", &self.held.len())
            .finish()
    }
}

/// The shared state, locked; a panic elsewhere while it was held leaves it usable (every change
/// to it is one map operation).
pub(super) fn lock(local: &Mutex<Local>) -> MutexGuard<'_, Local> {
    local.lock().unwrap_or_else(|p| p.into_inner())
}

/// A parked waiter's turn to ask the file about its lock after a release notice: a notice wakes
/// every waiter of the lock in the process, and their takes would only queue at the writer to
/// find it taken by the first. One asks; if it wins, the others get the lock from it in memory,
/// and if it loses, they wait for the next notice. The turn ends when this is dropped.
pub(super) struct Turn {
    local: Arc<Mutex<Local>>,
    name: String,
}

impl Turn {
    /// The turn to ask about `name`, unless another waiter of this client has it.
    pub(super) fn take(local: &Arc<Mutex<Local>>, name: &str) -> Option<Turn> {
        let mut guard = lock(local);
        guard.asking.insert(name.to_string()).then(|| Turn {
            local: local.clone(),
            name: name.to_string(),
        })
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut guard = lock(&self.local);
        guard.asking.remove(&self.name);
    }
}

impl Local {
    /// Puts `waiter` last in line for `name` (replacing its earlier place).
    pub(super) fn park(&mut self, name: String, waiter: Parked) {
        self.unpark(&name, &waiter.owner);
        self.parked.entry(name).or_default().push_back(waiter);
    }

    /// Takes `owner`'s place in line for `name` away, and every place whose waiter is gone.
    pub(super) fn unpark(&mut self, name: &str, owner: &str) {
        if let Some(queue) = self.parked.get_mut(name) {
            queue.retain(|p| p.owner != owner && !p.grant.is_closed());
            if queue.is_empty() {
                self.parked.remove(name);
            }
        }
    }

    /// Puts a waiter that was not handed the lock after all back at the head of the line.
    pub(super) fn put_back(&mut self, name: String, waiter: Parked) {
        self.parked.entry(name).or_default().push_front(waiter);
    }

    /// The first waiter still waiting for `name`, if the lock may be handed over once more;
    /// counts the streak (a release with nobody parked, or past the limit, ends it).
    pub(super) fn next_parked(&mut self, name: &str) -> Option<Parked> {
        let streak = self.streaks.get(name).copied().unwrap_or(0);
        let Some(waiting) = self.parked.get_mut(name) else {
            self.streaks.remove(name);
            return None;
        };
        if streak >= MAX_HANDOVERS {
            self.streaks.remove(name);
            return None;
        }
        while let Some(next) = waiting.pop_front() {
            if !next.grant.is_closed() {
                if waiting.is_empty() {
                    self.parked.remove(name);
                }
                *self.streaks.entry(name.to_string()).or_default() += 1;
                return Some(next);
            }
        }
        self.parked.remove(name);
        self.streaks.remove(name);
        None
    }

    /// Ends the streak of `name` (a lock freed for every process).
    pub(super) fn end_streak(&mut self, name: &str) {
        self.streaks.remove(name);
    }

    /// A release of `name` by `owner` (its holding `token`, when given): hands the lock to the
    /// first parked waiter in memory if it can (see the module doc). True when it did; the
    /// release is then done. False: the writer must release (and may hand over in its
    /// transaction).
    ///
    /// `notices` reads the release counter of the lock's slot now: a change since the take
    /// (a forced release, or a release of another lock of the slot) leaves it to the writer.
    pub(super) fn hand_over(
        &mut self,
        name: &str,
        owner: &str,
        token: Option<i64>,
        notices: impl FnOnce() -> Option<u64>,
    ) -> bool {
        let Some(held) = self.held.get(name) else {
            return false;
        };
        if held.now.owner != owner || token.is_some_and(|t| t != held.now.token) {
            return false;
        }
        // At the streak's limit the writer frees the lock (its `next_parked` ends the streak).
        let streak = self.streaks.get(name).copied();
        let next = held.now.token + 1;
        if next > held.reserved
            || !self.parked.contains_key(name)
            || streak.is_some_and(|s| s >= MAX_HANDOVERS)
        {
            return false;
        }
        if notices() != Some(held.notices) {
            return false;
        }
        let expires_ms = held.expires_ms;
        loop {
            // Peek first: a waiter the row cannot give half its lease is left for the writer,
            // whose take in the release's transaction starts a full one.
            let Some(waiting) = self.parked.get_mut(name) else {
                return false;
            };
            while waiting.front().is_some_and(|w| w.grant.is_closed()) {
                waiting.pop_front();
            }
            let Some(first) = waiting.front() else {
                return false;
            };
            let left = expires_ms - clock::boottime_ms();
            if left < first.lease_ms / 2 {
                return false;
            }
            let Some(waiter) = self.next_parked(name) else {
                return false;
            };
            let grant = Grant {
                token: next,
                at: Instant::now(),
                lease_ms: left,
            };
            if waiter.grant.send(grant).is_ok() {
                let held = self.held.get_mut(name).expect("checked above");
                held.now = Holding {
                    owner: waiter.owner,
                    token: next,
                };
                return true;
            }
            // That waiter left meanwhile: the streak did not grow; try the next one.
            match streak {
                Some(s) => self.streaks.insert(name.to_string(), s),
                None => self.streaks.remove(name),
            };
        }
    }

    /// How long the lease of `name` has left, if this client holds it for another owner than
    /// `owner` (and the row's lease has not ended).
    pub(super) fn held_for_another(&self, name: &str, owner: &str) -> Option<Duration> {
        let held = self.held.get(name)?;
        let left = held.expires_ms - clock::boottime_ms();
        (held.now.owner != owner && left > 0).then(|| Duration::from_millis(left as u64))
    }

    /// The row of `name` and the holding of now, when a hand-over in memory made them differ:
    /// the writer moves the row before any other write about the lock.
    pub(super) fn moved(&self, name: &str) -> Option<(Holding, Holding)> {
        let held = self.held.get(name)?;
        (held.row != held.now).then(|| (held.row.clone(), held.now.clone()))
    }

    /// After a commit: the row of `name` was moved to `to` (`None`: there was no row to move,
    /// the holding is gone).
    pub(super) fn moved_to(&mut self, name: &str, to: Option<Holding>) {
        match to {
            Some(to) => {
                if let Some(held) = self.held.get_mut(name) {
                    held.row = to;
                }
            }
            None => {
                self.held.remove(name);
            }
        }
    }

    /// After a commit, under the writers' lock: `holding` took `name` with a new token (its
    /// take reserved the tokens after it) and a lease until `expires_ms`; `notices` is the
    /// release counter of its slot now.
    pub(super) fn taken(&mut self, name: &str, holding: Holding, expires_ms: i64, notices: u64) {
        if self.held.len() > PRUNE_ABOVE {
            let now = clock::boottime_ms();
            self.held.retain(|_, held| held.expires_ms > now);
        }
        let reserved = holding.token + RESERVED;
        self.held.insert(
            name.to_string(),
            Held {
                row: holding.clone(),
                now: holding,
                expires_ms,
                reserved,
                notices,
            },
        );
    }

    /// After a commit: the row's holding `holding` of `name` was renewed until `expires_ms`.
    pub(super) fn renewed(&mut self, name: &str, holding: &Holding, expires_ms: i64) {
        if let Some(held) = self.held.get_mut(name)
            && held.row == *holding
        {
            held.expires_ms = expires_ms;
        }
    }

    /// After a commit: `owner` released its holding `token` of `name` (any, for `None`), or
    /// found it gone: forget the lock if that was the holding of now. (Never while another
    /// holding is current: a previous holder's release must go on finding the row moved.)
    pub(super) fn released(&mut self, name: &str, owner: &str, token: Option<i64>) {
        if self.held.get(name).is_some_and(|held| {
            held.now.owner == owner && token.is_none_or(|t| t == held.now.token)
        }) {
            self.held.remove(name);
        }
    }

    /// After a commit: `name`'s row was removed whoever held it.
    pub(super) fn forget(&mut self, name: &str) {
        self.held.remove(name);
    }
}
