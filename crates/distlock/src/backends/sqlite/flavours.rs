//! The fair lock, the read-write lock and the semaphore in the SQLite file
//! (`sql/schema_flavours.sql`): each step an op of the writer thread, atomic in its
//! `BEGIN IMMEDIATE` transaction like a take of the plain lock.
//!
//! One table of holdings serves the three: a row per holding (a fair holder, each reader, the
//! writer, each permit), with its own lease and fencing token, purged once its lease is over
//! before any step judges who holds. Waiters that must keep a place (fair-lock waiters, in
//! arrival order; waiting writers, who hold new readers back) have a row in
//! `distlock_waiters` with a deadline of their own ([`WAITER_TTL_MS`]): a waiter asks again
//! well before it (each "held" answer is at most a third of it), and a crashed one's place
//! lapses, so it holds up the others for one waiter lease at most.
//!
//! Fencing tokens come from `distlock_fencing` under the key `name + "\n" + family`: lock names
//! cannot hold a newline, so the key never meets a plain lock's, and the counter has the same
//! wall-clock floor (`sql/next_token.sql`). The two sides of a read-write lock share one.
//!
//! A release, a waiter leaving, a resize and a forced release bump the sidecar counter of the
//! synchronizer ([`slot`]) after the commit, so waiters in every process wake by inotify. In-
//! memory hand-over (`handover.rs`) is for the plain lock only.

use rusqlite::{Connection, OptionalExtension, params};

use super::clock;
use super::inspect::{Row, live_removed};
use super::sidecar::slot_of;

pub(super) use crate::backends::client_rules::flavour_rules::{Side, WAITER_TTL_MS};

/// The sidecar counter a synchronizer's waiters listen on: a name no plain lock has (the hash
/// input carries a control character, which lock names cannot), so their releases do not wake
/// the plain lock's waiters nor stop its hand-overs in memory.
pub(super) fn slot(family: &str, name: &str) -> usize {
    slot_of(&format!("\u{1}{family}\u{1}{name}"))
}

/// The key of a synchronizer's fencing counter in `distlock_fencing`.
fn fence_key(family: &str, name: &str) -> String {
    format!("{name}\n{family}")
}

/// One step on a fair lock, read-write lock or semaphore.
#[derive(Debug)]
pub(super) enum FlavourOp {
    /// Take the side if the rules let the owner in, restart the owner's own holding, or say how
    /// long until it is worth asking again. With `queue`, a fair waiter or writer that is
    /// blocked keeps (or takes) its place in line.
    Take {
        side: Side,
        name: String,
        owner: String,
        lease_ms: i64,
        queue: bool,
        /// A semaphore's size as the caller asks it.
        permits: u32,
        /// Go by the size the file keeps, whatever it is (a waiter's later attempts).
        follows_resize: bool,
    },
    /// Restart the lease of the holding `token`.
    Extend {
        side: Side,
        name: String,
        owner: String,
        token: i64,
        lease_ms: i64,
    },
    /// Free the owner's holding (with `token`, when given).
    Release {
        side: Side,
        name: String,
        owner: String,
        token: Option<i64>,
    },
    /// A waiter gives up its place in line.
    Leave {
        side: Side,
        name: String,
        owner: String,
    },
    /// A semaphore's size and the permits held now.
    Count { name: String },
    /// Change a semaphore's size.
    SetPermits { name: String, permits: u32 },
    /// Remove every holding of the side, whoever holds it, and advance the fencing counter.
    Force { side: Side, name: String },
    /// The live holdings and waiters of the synchronizers named `name`, or whose name starts
    /// with `prefix`.
    Status {
        name: Option<String>,
        prefix: String,
    },
}

/// What a [`FlavourOp`] did.
#[derive(Debug)]
pub(super) enum FlavourAnswer {
    /// The caller holds it, with this token (new, or its own holding restarted).
    Taken(i64),
    /// Blocked: ask again in `left_ms` at the latest. `notify`: the step dropped lapsed places
    /// of waiters, so the new first in line must be told.
    Held { left_ms: i64, notify: bool },
    /// The semaphore keeps another size than the caller asked (nothing changed).
    SizeDiffers(i64),
    /// A reader asked for the write side (refused: upgrading could deadlock two readers).
    Upgrade,
    /// Whether the extend, release or leave found its row; `notify` after a change waiters
    /// wait for.
    Done { found: bool, notify: bool },
    /// The size a semaphore keeps (`None`: never used) and how many of its permits are held.
    Permits { size: Option<i64>, held: i64 },
    /// The size a semaphore had before a resize.
    Resized(Option<i64>),
    /// What a forced release removed and the token it advanced the counter to.
    Forced { removed: Vec<Row>, fence: i64 },
    /// Live holdings (side and row) and waiters per synchronizer (name, family, count).
    Status {
        holdings: Vec<(Side, Row)>,
        sizes: Vec<(String, i64)>,
        waiters: Vec<(String, String, i64)>,
    },
}

impl FlavourOp {
    pub(super) fn name(&self) -> &str {
        match self {
            FlavourOp::Take { name, .. }
            | FlavourOp::Extend { name, .. }
            | FlavourOp::Release { name, .. }
            | FlavourOp::Leave { name, .. }
            | FlavourOp::Count { name, .. }
            | FlavourOp::SetPermits { name, .. }
            | FlavourOp::Force { name, .. } => name,
            FlavourOp::Status { name, prefix } => name.as_deref().unwrap_or(prefix),
        }
    }

    /// The counter to bump after the commit, if `answer` changed what waiters wait for.
    pub(super) fn notifies(&self, answer: &FlavourAnswer) -> Option<usize> {
        let (family, name) = match (self, answer) {
            (
                FlavourOp::Release { side, name, .. } | FlavourOp::Leave { side, name, .. },
                FlavourAnswer::Done { notify: true, .. },
            )
            | (FlavourOp::Take { side, name, .. }, FlavourAnswer::Held { notify: true, .. })
            | (FlavourOp::Force { side, name }, _) => (side.family(), name),
            (FlavourOp::SetPermits { name, .. }, _) => (Side::Permit.family(), name),
            _ => return None,
        };
        Some(slot(family, name))
    }
}

/// Runs `op` inside the writer's transaction.
pub(super) fn apply(
    conn: &Connection,
    boot_id: &str,
    op: &FlavourOp,
) -> rusqlite::Result<FlavourAnswer> {
    let now = clock::boottime_ms();
    match op {
        FlavourOp::Take {
            side,
            name,
            owner,
            lease_ms,
            queue,
            permits,
            follows_resize,
        } => {
            let take = Take {
                conn,
                boot_id,
                now,
                side: *side,
                name,
                owner,
            };
            take.run(*lease_ms, *queue, *permits, *follows_resize)
        }
        FlavourOp::Extend {
            side,
            name,
            owner,
            token,
            lease_ms,
        } => {
            let updated = conn
                .prepare_cached(include_str!("sql/flavour_extend.sql"))?
                .execute(params![
                    side.family(),
                    name,
                    side.column(),
                    owner,
                    token,
                    now + lease_ms,
                    boot_id
                ])?;
            Ok(FlavourAnswer::Done {
                found: updated == 1,
                notify: false,
            })
        }
        FlavourOp::Release {
            side,
            name,
            owner,
            token,
        } => {
            let deleted = conn
                .prepare_cached(include_str!("sql/flavour_delete.sql"))?
                .execute(params![side.family(), name, side.column(), owner, token])?;
            Ok(FlavourAnswer::Done {
                found: deleted == 1,
                notify: deleted == 1,
            })
        }
        FlavourOp::Leave { side, name, owner } => {
            let deleted = conn
                .prepare_cached(include_str!("sql/waiter_delete.sql"))?
                .execute(params![side.family(), name, owner])?;
            Ok(FlavourAnswer::Done {
                found: deleted == 1,
                notify: deleted == 1,
            })
        }
        FlavourOp::Count { name } => {
            let family = Side::Permit.family();
            let size = sem_size(conn, name)?;
            purge(conn, family, name, boot_id, now)?;
            let (held, _) = others(conn, Side::Permit, name, "")?;
            Ok(FlavourAnswer::Permits { size, held })
        }
        FlavourOp::SetPermits { name, permits } => {
            let had = sem_size(conn, name)?;
            conn.prepare_cached(include_str!("sql/sem_set.sql"))?
                .execute(params![name, permits])?;
            Ok(FlavourAnswer::Resized(had))
        }
        FlavourOp::Force { side, name } => {
            let removed = live_removed(
                conn,
                include_str!("sql/flavour_force_delete.sql"),
                params![side.family(), name, side.column()],
                name,
                boot_id,
                now,
            )?;
            let fence = next_token(conn, side.family(), name)?;
            Ok(FlavourAnswer::Forced { removed, fence })
        }
        FlavourOp::Status { name, prefix } => status(conn, boot_id, now, name.as_deref(), prefix),
    }
}

/// One take, judged in the writer's transaction.
struct Take<'a> {
    conn: &'a Connection,
    boot_id: &'a str,
    now: i64,
    side: Side,
    name: &'a str,
    owner: &'a str,
}

impl Take<'_> {
    fn run(
        &self,
        lease_ms: i64,
        queue: bool,
        permits: u32,
        follows_resize: bool,
    ) -> rusqlite::Result<FlavourAnswer> {
        let (conn, side, name, owner, now) =
            (self.conn, self.side, self.name, self.owner, self.now);
        let family = side.family();
        let mut size = i64::from(permits);
        if side == Side::Permit {
            match sem_size(conn, name)? {
                // The first take sets the size, for everyone after.
                None => {
                    conn.prepare_cached(include_str!("sql/sem_set.sql"))?
                        .execute(params![name, permits])?;
                }
                Some(kept) if kept != size && !follows_resize => {
                    return Ok(FlavourAnswer::SizeDiffers(kept));
                }
                Some(kept) => size = kept,
            }
        }
        purge(conn, family, name, self.boot_id, now)?;
        let lapsed = if side.family() != Side::Permit.family() {
            conn.prepare_cached(include_str!("sql/waiter_purge.sql"))?
                .execute(params![family, name, self.boot_id, now])?
        } else {
            0
        };
        if let Some(token) = self.own(side)? {
            conn.prepare_cached(include_str!("sql/flavour_extend.sql"))?
                .execute(params![
                    family,
                    name,
                    side.column(),
                    owner,
                    token,
                    now + lease_ms,
                    self.boot_id
                ])?;
            return Ok(FlavourAnswer::Taken(token));
        }

        // Until when the side is blocked, if it is: the first lease (or waiter's place) that
        // must end before the owner may get in.
        let blocked_until = match side {
            Side::Fair => match others(conn, side, name, owner)? {
                (0, _) => match self.head()? {
                    Some((head, until)) if head != owner => Some(until),
                    _ => None,
                },
                (_, until) => until,
            },
            Side::Read => match others(conn, Side::Write, name, owner)? {
                (0, _) if self.own(Side::Write)?.is_some() => None,
                // Writer preference: while a writer waits, new readers wait too.
                (0, _) => match waiters_other_than(conn, family, name, owner)? {
                    (0, _) => None,
                    (_, until) => until,
                },
                (_, until) => until,
            },
            Side::Write => {
                if self.own(Side::Read)?.is_some() {
                    return Ok(FlavourAnswer::Upgrade);
                }
                match others(conn, Side::Write, name, owner)? {
                    (0, _) => match others(conn, Side::Read, name, owner)? {
                        (0, _) => None,
                        (_, until) => until,
                    },
                    (_, until) => until,
                }
            }
            Side::Permit => match others(conn, side, name, owner)? {
                (held, until) if held >= size => until,
                _ => None,
            },
        };

        if let Some(until) = blocked_until {
            let mut left_ms = (until - now).max(1);
            if side.queues() && queue {
                conn.prepare_cached(include_str!("sql/waiter_upsert.sql"))?
                    .execute(params![
                        family,
                        name,
                        owner,
                        self.boot_id,
                        now + WAITER_TTL_MS
                    ])?;
            }
            if side.queues() {
                // Asks again well before its place lapses, so a live waiter keeps it.
                left_ms = left_ms.min(WAITER_TTL_MS / 3);
            }
            return Ok(FlavourAnswer::Held {
                left_ms,
                notify: lapsed > 0,
            });
        }

        if side.queues() {
            conn.prepare_cached(include_str!("sql/waiter_delete.sql"))?
                .execute(params![family, name, owner])?;
        }
        let token = next_token(conn, family, name)?;
        conn.prepare_cached(include_str!("sql/flavour_insert.sql"))?
            .execute(params![
                family,
                name,
                side.column(),
                owner,
                token,
                self.boot_id,
                now + lease_ms,
                crate::status::Holder::this_process_record(),
                clock::wall_us() / 1000
            ])?;
        Ok(FlavourAnswer::Taken(token))
    }

    /// The owner's live holding of `side`, if any.
    fn own(&self, side: Side) -> rusqlite::Result<Option<i64>> {
        self.conn
            .prepare_cached(include_str!("sql/flavour_own.sql"))?
            .query_row(
                params![side.family(), self.name, side.column(), self.owner],
                |row| row.get(0),
            )
            .optional()
    }

    /// The first in line, and until when its place lasts.
    fn head(&self) -> rusqlite::Result<Option<(String, i64)>> {
        self.conn
            .prepare_cached(include_str!("sql/waiter_head.sql"))?
            .query_row(params![self.side.family(), self.name], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()
    }
}

fn purge(
    conn: &Connection,
    family: &str,
    name: &str,
    boot_id: &str,
    now: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(include_str!("sql/flavour_purge.sql"))?
        .execute(params![family, name, boot_id, now])?;
    Ok(())
}

/// How many holdings of `side` owners other than `owner` have, and when the first ends.
fn others(
    conn: &Connection,
    side: Side,
    name: &str,
    owner: &str,
) -> rusqlite::Result<(i64, Option<i64>)> {
    conn.prepare_cached(include_str!("sql/flavour_others.sql"))?
        .query_row(params![side.family(), name, side.column(), owner], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
}

/// How many waiters other than `owner` are in line, and when the first place lapses.
fn waiters_other_than(
    conn: &Connection,
    family: &str,
    name: &str,
    owner: &str,
) -> rusqlite::Result<(i64, Option<i64>)> {
    conn.prepare_cached(include_str!("sql/waiter_others.sql"))?
        .query_row(params![family, name, owner], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
}

fn sem_size(conn: &Connection, name: &str) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached(include_str!("sql/sem_size.sql"))?
        .query_row(params![name], |row| row.get(0))
        .optional()
}

/// The next fencing token of a synchronizer (no tokens reserved: no hand-over in memory).
fn next_token(conn: &Connection, family: &str, name: &str) -> rusqlite::Result<i64> {
    conn.prepare_cached(include_str!("sql/next_token.sql"))?
        .query_row(
            params![fence_key(family, name), clock::wall_us(), 0],
            |row| row.get(0),
        )
}

fn status(
    conn: &Connection,
    boot_id: &str,
    now: i64,
    name: Option<&str>,
    prefix: &str,
) -> rusqlite::Result<FlavourAnswer> {
    let holdings = conn
        .prepare_cached(include_str!("sql/flavour_status.sql"))?
        .query_map(params![name, prefix, boot_id, now], |row| {
            Ok((row.get::<_, String>(6)?, Row::from_status(row)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?
        .into_iter()
        .filter_map(|(side, row)| Side::from_column(&side).map(|side| (side, row)))
        .collect::<Vec<_>>();
    let mut sizes = Vec::new();
    for (side, row) in &holdings {
        if *side == Side::Permit && !sizes.iter().any(|(n, _)| n == &row.name) {
            let size = sem_size(conn, &row.name)?.unwrap_or(0);
            sizes.push((row.name.clone(), size));
        }
    }
    let waiters = conn
        .prepare_cached(include_str!("sql/waiter_status.sql"))?
        .query_map(params![name, prefix, boot_id, now], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(FlavourAnswer::Status {
        holdings,
        sizes,
        waiters,
    })
}
