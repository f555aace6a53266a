//! The writer: one thread per backend that owns the SQLite connection and runs every take,
//! extend and release.
//!
//! Why a thread of its own rather than a pool of async connections: each statement then costs
//! one function call on prepared (cached) statements instead of a hop to a driver thread and
//! back, and the writer can wait for the sidecar's flock (a blocking call) without tying up the
//! async runtime. Callers hand it [`Op`]s over a channel and await the answer.
//!
//! Group commit: after queueing for the flock, the writer runs every op that arrived meanwhile
//! in one `BEGIN IMMEDIATE` transaction. Each op is still atomic (a transaction is), and the
//! batch shares one lock hand-off and one commit. If the batch fails, each op is run again in a
//! transaction of its own, so one op's error is never another's.
//!
//! Hand-over (`handover.rs`): a waiter of this client that found the lock held parks, and a
//! release of that lock hands it to the first parked waiter instead of freeing it, notifying
//! every process and letting them race for it: in memory, in the releasing task, when it can,
//! else here, in the release's own transaction (a new holding with a new fencing token). At most
//! `MAX_HANDOVERS` in a row per lock: the next release frees it for all processes. Before any
//! other write about a lock handed over in memory, the writer moves its row to the holding of
//! now, in that write's transaction.

use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tokio::sync::oneshot;

use super::clock;
use super::flavours::{FlavourAnswer, FlavourOp};
use super::handover::{Grant, Holding, Local, Parked, RESERVED, Turn, lock};
use super::inspect::{self, Row};
use super::sidecar::{Sidecar, WritersLock, slot_of};
use super::sync::{SyncAnswer, SyncOp};

/// The most ops one transaction carries, so one batch never keeps the file for long.
const MAX_BATCH: usize = 64;

/// One change to the lock table, as asked by [`super::SqliteBackend`].
#[derive(Debug)]
pub(super) enum Op {
    /// `try_take`: take the lock if free or expired, restart the owner's own lease, or report
    /// the lease left of another owner.
    Take {
        name: String,
        owner: String,
        lease_ms: i64,
    },
    /// Restart the lease of the holding `token`.
    Extend {
        name: String,
        owner: String,
        token: i64,
        lease_ms: i64,
    },
    /// Free the lock if `owner` holds it (with `token`, when given).
    Release {
        name: String,
        owner: String,
        token: Option<i64>,
    },
    /// The waiter gives up its place; once answered, no grant for it will be sent.
    Unpark { name: String, owner: String },
    /// An election or latch step (`sync.rs`).
    Sync(SyncOp),
    /// The live holdings of lock `name`, or of every lock whose name starts with `prefix`
    /// (`inspect.rs`).
    Status {
        name: Option<String>,
        prefix: String,
    },
    /// Remove the lock whoever holds it and advance its fencing counter.
    ForceRelease { name: String },
    /// A step on a fair lock, read-write lock or semaphore (`flavours.rs`).
    Flavour(FlavourOp),
}

/// What the writer sends once a batch has committed and the writers' lock is given back.
enum Reply {
    /// An op's answer.
    Answer(Job, Result<Answer, Failure>),
    /// A lock taken for a parked waiter of lock `name`.
    Grant {
        to: Parked,
        name: String,
        grant: Grant,
    },
}

/// A release whose transaction took the lock for a parked waiter.
struct HandedOver {
    /// Which op of the batch.
    release: usize,
    to: Parked,
    token: i64,
}

/// What an [`Op`] did.
#[derive(Debug)]
pub(super) enum Answer {
    /// The lock is the caller's, with this fencing token.
    Taken(i64),
    /// The caller's own live holding, with this fencing token, found by a take: its lease
    /// restarted (answered to the caller as `Taken`).
    Kept(i64),
    /// Another owner holds it, for this long still.
    Held(Duration),
    /// Whether the extend or release found the holding.
    Done(bool),
    /// What an election or latch step answered.
    Sync(SyncAnswer),
    /// The holdings a status found.
    Status(Vec<Row>),
    /// What a forced release removed, and the fencing token it advanced the counter to.
    Forced { removed: Option<Row>, fence: i64 },
    /// What a fair-lock, read-write lock or semaphore step answered.
    Flavour(FlavourAnswer),
}

/// Why an op did not run; turned into distlock's error by the backend.
#[derive(Debug, thiserror::Error)]
pub(super) enum Failure {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("the write lock was not free within {0:?}")]
    Busy(Duration),
    #[error("the writer thread has stopped")]
    Stopped,
}

struct Job {
    op: Op,
    queued: Instant,
    answer: oneshot::Sender<Result<Answer, Failure>>,
}

/// The caller's side of the writer thread. The thread ends when the last clone is dropped.
#[derive(Clone, Debug)]
pub(super) struct Writer {
    jobs: mpsc::Sender<Job>,
    busy_timeout: Duration,
    local: Arc<Mutex<Local>>,
    sidecar: Arc<Sidecar>,
}

impl Writer {
    /// Starts the writer over `conn` (already in WAL mode, tables created).
    pub(super) fn start(
        conn: Connection,
        sidecar: Arc<Sidecar>,
        boot_id: String,
        busy_timeout: Duration,
    ) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel();
        let local = Arc::new(Mutex::new(Local::default()));
        let thread = WriterThread {
            conn,
            sidecar: sidecar.clone(),
            boot_id,
            busy_timeout,
            local: local.clone(),
        };
        std::thread::Builder::new()
            .name("distlock-sqlite".into())
            .spawn(move || thread.run(queue))?;
        Ok(Writer {
            jobs,
            busy_timeout,
            local,
            sidecar,
        })
    }

    /// A release of `name` by `owner` (its holding `token`, when given) handed to a parked
    /// waiter in memory, without the writer: true when done (see `handover.rs`).
    pub(super) fn hand_over(&self, name: &str, owner: &str, token: Option<i64>) -> bool {
        let notices = || self.sidecar.counter(slot_of(name)).ok();
        lock(&self.local).hand_over(name, owner, token, notices)
    }

    /// How long the lease of lock `name` has left, if this client holds it for another owner
    /// than `owner`: a take by `owner` would find it held.
    pub(super) fn held_here(&self, name: &str, owner: &str) -> Option<Duration> {
        lock(&self.local).held_for_another(name, owner)
    }

    /// A parked waiter's turn to ask the file about lock `name` (see [`Turn`]); `None` while
    /// another waiter of this client asks.
    pub(super) fn turn(&self, name: &str) -> Option<Turn> {
        Turn::take(&self.local, name)
    }

    /// Puts a waiter that found lock `name` held in line for a hand-over (replacing its earlier
    /// place). Its take has been answered, so no grant can cross it.
    pub(super) fn park(&self, name: String, waiter: Parked) {
        lock(&self.local).park(name, waiter);
    }

    /// Runs `op` and answers what it did. A caller that gives up (drops the future, or waits
    /// past the busy timeout) leaves an op the writer will skip if it has not started it.
    pub(super) async fn run(&self, op: Op) -> Result<Answer, Failure> {
        let (answer, answered) = oneshot::channel();
        let job = Job {
            op,
            queued: Instant::now(),
            answer,
        };
        self.jobs.send(job).map_err(|_| Failure::Stopped)?;
        match tokio::time::timeout(self.busy_timeout, answered).await {
            Ok(answer) => answer.map_err(|_| Failure::Stopped)?,
            Err(_) => Err(Failure::Busy(self.busy_timeout)),
        }
    }
}

struct WriterThread {
    conn: Connection,
    sidecar: Arc<Sidecar>,
    boot_id: String,
    busy_timeout: Duration,
    /// Parked waiters, hand-over streaks and the locks this client holds, shared with the
    /// client's tasks.
    local: Arc<Mutex<Local>>,
}

impl WriterThread {
    fn run(mut self, queue: mpsc::Receiver<Job>) {
        let sidecar = self.sidecar.clone();
        while let Ok(first) = queue.recv() {
            // Leaving a wait needs no transaction: noted here, in arrival order.
            let Some(first) = self.intake(first) else {
                continue;
            };
            let turn = match sidecar.lock_writers() {
                Ok(turn) => turn,
                Err(e) => {
                    let _ = first.answer.send(Err(Failure::Io(e)));
                    continue;
                }
            };
            // Everything queued while we waited for our turn rides in the same transaction.
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH
                && let Ok(job) = queue.try_recv()
            {
                if let Some(job) = self.intake(job) {
                    batch.push(job);
                }
            }
            let replies = self.run_batch(&turn, batch);
            // The flock goes before anyone hears back: a caller may run on at once and its
            // process be stopped (a GC pause, SIGSTOP) right after taking a lock, and a stopped
            // process must not keep every other process's writer waiting (it held up a whole
            // pause scenario of the demo for the length of the stop when this thread was slow
            // to get back to the unlock after answering).
            drop(turn);
            for reply in replies {
                match reply {
                    Reply::Answer(job, answer) => {
                        let _ = job.answer.send(answer);
                    }
                    Reply::Grant { to, name, grant } => {
                        let token = grant.token;
                        if to.grant.send(grant).is_err() {
                            // The waiter left since the commit: free what was taken for it.
                            match sidecar.lock_writers() {
                                Ok(turn) => self.release_orphan(&turn, &name, to.owner, token),
                                Err(e) => tracing::debug!(
                                    "a grant nobody took stays until its lease ends: {e}"
                                ),
                            }
                        }
                    }
                }
            }
        }
    }

    /// Notes parkings; hands every other op back for the next transaction.
    fn intake(&mut self, job: Job) -> Option<Job> {
        match job.op {
            Op::Unpark { name, owner } => {
                lock(&self.local).unpark(&name, &owner);
                let _ = job.answer.send(Ok(Answer::Done(true)));
                None
            }
            // A waiter trying again itself gives up its place: no grant may follow its take.
            Op::Take {
                ref name,
                ref owner,
                ..
            } => {
                lock(&self.local).unpark(name, owner);
                Some(job)
            }
            _ => Some(job),
        }
    }

    /// Runs `batch` and tells waiters in other processes of the locks it freed; the answers
    /// and grants go out once the writers' lock is given back.
    fn run_batch(&mut self, turn: &WritersLock<'_>, batch: Vec<Job>) -> Vec<Reply> {
        // Skip ops nobody waits for any more: their callers already reported a failure.
        let batch: Vec<Job> = batch
            .into_iter()
            .filter(|job| !job.answer.is_closed() && job.queued.elapsed() < self.busy_timeout)
            .collect();
        if batch.is_empty() {
            return Vec::new();
        }
        let ops: Vec<&Op> = batch.iter().map(|job| &job.op).collect();
        let started = Instant::now();
        let mut handed = Vec::new();
        let answers = match self.transaction(&ops, &mut handed) {
            Ok(answers) => answers.into_iter().map(Ok).collect(),
            Err(_) if batch.len() > 1 => {
                let mut answers = Vec::with_capacity(ops.len());
                for (i, op) in ops.iter().enumerate() {
                    let mut one_handed = Vec::new();
                    answers.push(
                        self.transaction(&[op], &mut one_handed)
                            .map(|mut one| one.remove(0)),
                    );
                    handed.extend(
                        one_handed
                            .into_iter()
                            .map(|h| HandedOver { release: i, ..h }),
                    );
                }
                answers
            }
            Err(failure) => vec![Err(failure)],
        };
        let handed_names: Vec<String> = handed.iter().map(|h| ops_name(ops[h.release])).collect();
        drop(ops);
        let mut freed = Vec::new();
        let mut replies = Vec::with_capacity(batch.len() + handed.len());
        for (i, (job, answer)) in batch.into_iter().zip(answers).enumerate() {
            if let (Op::Release { name, .. }, Ok(Answer::Done(true))) = (&job.op, &answer)
                && !handed.iter().any(|h| h.release == i)
            {
                freed.push(slot_of(name));
            }
            if let Op::ForceRelease { name } = &job.op {
                freed.push(slot_of(name));
            }
            if let (Op::Sync(op), Ok(Answer::Sync(answer))) = (&job.op, &answer)
                && let Some(slot) = op.notifies(answer)
            {
                freed.push(slot);
            }
            if let (Op::Flavour(op), Ok(Answer::Flavour(answer))) = (&job.op, &answer)
                && let Some(slot) = op.notifies(answer)
            {
                freed.push(slot);
            }
            replies.push(Reply::Answer(job, answer));
        }
        for (h, name) in handed.into_iter().zip(handed_names) {
            if h.to.grant.is_closed() {
                // The waiter left meanwhile: free what was taken for it.
                self.release_orphan(turn, &name, h.to.owner, h.token);
            } else {
                let grant = Grant {
                    token: h.token,
                    at: started,
                    lease_ms: h.to.lease_ms,
                };
                replies.push(Reply::Grant {
                    to: h.to,
                    name,
                    grant,
                });
            }
        }
        // After the commit, so a woken waiter finds the lock free.
        for slot in freed {
            if let Err(e) = turn.bump(slot) {
                tracing::debug!("release notice not written, waiters fall back on timers: {e}");
            }
        }
        replies
    }

    /// Frees a holding taken for a waiter that was gone when it was handed over.
    fn release_orphan(&mut self, turn: &WritersLock<'_>, name: &str, owner: String, token: i64) {
        let op = Op::Release {
            name: name.to_string(),
            owner,
            token: Some(token),
        };
        lock(&self.local).end_streak(name);
        match self.transaction(&[&op], &mut Vec::new()) {
            Ok(_) => {
                if let Err(e) = turn.bump(slot_of(name)) {
                    tracing::debug!("release notice not written: {e}");
                }
            }
            Err(e) => {
                tracing::warn!(lock = %name, "freeing a lock handed to a waiter that left failed (its lease will end): {e}")
            }
        }
    }

    /// Runs `ops` in one write transaction: all of them commit, or none. A release that frees a
    /// lock with a waiter parked takes it for that waiter in the same transaction (listed in
    /// `handed`, by op index), unless the lock was handed over `MAX_HANDOVERS` times in a row.
    /// A lock handed over in memory has its row moved to the holding of now first.
    fn transaction(
        &mut self,
        ops: &[&Op],
        handed: &mut Vec<HandedOver>,
    ) -> Result<Vec<Answer>, Failure> {
        // Every lease this transaction writes ends no earlier than this plus its length.
        let now = clock::boottime_ms();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut answers = Vec::with_capacity(ops.len());
        // Rows moved in this transaction: to the holding of now, or None if it was gone.
        let mut moves: Vec<(String, Option<Holding>)> = Vec::new();
        let outcome = (|| {
            for (i, op) in ops.iter().enumerate() {
                if let Some(name) = moved_name(op) {
                    move_row(&tx, &self.local, &self.boot_id, name, &mut moves)?;
                }
                let answer = apply(&tx, &self.boot_id, op)?;
                if let (Op::Release { name, .. }, Answer::Done(true)) = (op, &answer)
                    && let Some(to) = lock(&self.local).next_parked(name)
                {
                    let take = Op::Take {
                        name: name.clone(),
                        owner: to.owner.clone(),
                        lease_ms: to.lease_ms,
                    };
                    handed.push(HandedOver {
                        release: i,
                        to,
                        token: 0,
                    });
                    match apply(&tx, &self.boot_id, &take)? {
                        Answer::Taken(token) => {
                            handed.last_mut().expect("just pushed").token = token
                        }
                        // The row was deleted in this transaction: the take cannot find it held.
                        _ => {
                            let back = handed.pop().expect("just pushed").to;
                            lock(&self.local).put_back(name.clone(), back);
                        }
                    }
                }
                answers.push(answer);
            }
            Ok::<_, Failure>(())
        })();
        let committed = outcome.and_then(|()| tx.commit().map_err(Failure::from));
        if let Err(failure) = committed {
            // Nothing was taken: the waiters keep their places, first in line again.
            let mut local = lock(&self.local);
            for h in handed.drain(..).rev() {
                local.put_back(ops_name(ops[h.release]), h.to);
            }
            return Err(failure);
        }
        self.record(ops, &answers, handed, moves, now);
        Ok(answers
            .into_iter()
            .map(|answer| match answer {
                Answer::Kept(token) => Answer::Taken(token),
                other => other,
            })
            .collect())
    }

    /// After a commit: what it did to the locks this client holds (`handover.rs`); `now` is from
    /// before the transaction, so the leases noted end no later than the ones written.
    fn record(
        &self,
        ops: &[&Op],
        answers: &[Answer],
        handed: &[HandedOver],
        moves: Vec<(String, Option<Holding>)>,
        now: i64,
    ) {
        let mut local = lock(&self.local);
        for (name, to) in moves {
            local.moved_to(&name, to);
        }
        for (op, answer) in ops.iter().zip(answers) {
            match (op, answer) {
                (
                    Op::Take {
                        name,
                        owner,
                        lease_ms,
                    },
                    Answer::Taken(token) | Answer::Kept(token),
                ) => {
                    let holding = Holding {
                        owner: owner.clone(),
                        token: *token,
                    };
                    if matches!(answer, Answer::Taken(_)) {
                        match self.sidecar.counter(slot_of(name)) {
                            Ok(notices) => local.taken(name, holding, now + lease_ms, notices),
                            // No hand-over in memory without the counter to check.
                            Err(_) => local.forget(name),
                        }
                    } else {
                        local.renewed(name, &holding, now + lease_ms);
                    }
                }
                (
                    Op::Extend {
                        name,
                        owner,
                        token,
                        lease_ms,
                    },
                    Answer::Done(true),
                ) => {
                    let holding = Holding {
                        owner: owner.clone(),
                        token: *token,
                    };
                    local.renewed(name, &holding, now + lease_ms);
                }
                (Op::Release { name, owner, token }, Answer::Done(_)) => {
                    local.released(name, owner, *token)
                }
                (Op::ForceRelease { name }, _) => local.forget(name),
                _ => {}
            }
        }
        for h in handed {
            let holding = Holding {
                owner: h.to.owner.clone(),
                token: h.token,
            };
            let name = ops_name(ops[h.release]);
            match self.sidecar.counter(slot_of(&name)) {
                Ok(notices) => local.taken(&name, holding, now + h.to.lease_ms, notices),
                Err(_) => local.forget(&name),
            }
        }
    }
}

/// Moves the row of lock `name` to the holding a hand-over in memory made current, if one
/// did and this transaction has not yet (`moves`).
fn move_row(
    tx: &Connection,
    local: &Mutex<Local>,
    boot_id: &str,
    name: &str,
    moves: &mut Vec<(String, Option<Holding>)>,
) -> rusqlite::Result<()> {
    let Some((row, to)) = lock(local).moved(name) else {
        return Ok(());
    };
    let row = match moves.iter().rev().find(|(moved, _)| moved == name) {
        Some((_, Some(earlier))) => earlier.clone(),
        Some((_, None)) => return Ok(()),
        None => row,
    };
    if row == to {
        return Ok(());
    }
    let moved = tx
        .prepare_cached(include_str!("sql/move_holding.sql"))?
        .execute(params![
            name,
            row.owner,
            row.token,
            boot_id,
            to.owner,
            to.token,
            clock::wall_us() / 1000
        ])?;
    moves.push((name.to_string(), (moved == 1).then_some(to)));
    Ok(())
}

/// The lock name an op is about.
fn ops_name(op: &Op) -> String {
    match op {
        Op::Take { name, .. }
        | Op::Extend { name, .. }
        | Op::Release { name, .. }
        | Op::Unpark { name, .. }
        | Op::ForceRelease { name } => name.clone(),
        Op::Status { name, prefix } => name.clone().unwrap_or_else(|| prefix.clone()),
        Op::Sync(op) => op.name().to_string(),
        Op::Flavour(op) => op.name().to_string(),
    }
}

/// The lock whose row must name the holding of now before `op` runs: the ops that match or
/// show the holding.
fn moved_name(op: &Op) -> Option<&str> {
    match op {
        Op::Take { name, .. } | Op::Extend { name, .. } | Op::Release { name, .. } => Some(name),
        Op::Status {
            name: Some(name), ..
        } => Some(name),
        _ => None,
    }
}

/// One op inside the batch's transaction.
fn apply(conn: &Connection, boot_id: &str, op: &Op) -> rusqlite::Result<Answer> {
    let now = clock::boottime_ms();
    match op {
        Op::Take {
            name,
            owner,
            lease_ms,
        } => {
            let expires = now + lease_ms;
            let row = conn
                .prepare_cached(include_str!("sql/select_lock.sql"))?
                .query_row(params![name], |row| {
                    Ok((
                        row.get::<_, String>("owner")?,
                        row.get::<_, i64>("token")?,
                        row.get::<_, String>("boot_id")? == boot_id,
                        row.get::<_, i64>("expires_ms")?,
                    ))
                })
                .optional()?;
            if let Some((holder, token, this_boot, until)) = row
                && this_boot
                && until > now
            {
                if holder != *owner {
                    return Ok(Answer::Held(Duration::from_millis((until - now) as u64)));
                }
                // Our own live holding: restart its lease and answer its token.
                extend(conn, name, owner, token, expires, boot_id)?;
                return Ok(Answer::Kept(token));
            }
            let token: i64 = conn
                .prepare_cached(include_str!("sql/next_token.sql"))?
                .query_row(params![name, clock::wall_us(), RESERVED], |row| row.get(0))?;
            conn.prepare_cached(include_str!("sql/take.sql"))?
                .execute(params![
                    name,
                    owner,
                    token,
                    boot_id,
                    expires,
                    crate::status::Holder::this_process_record(),
                    clock::wall_us() / 1000
                ])?;
            Ok(Answer::Taken(token))
        }
        Op::Extend {
            name,
            owner,
            token,
            lease_ms,
        } => extend(conn, name, owner, *token, now + lease_ms, boot_id).map(Answer::Done),
        Op::Release { name, owner, token } => {
            let deleted = conn
                .prepare_cached(include_str!("sql/delete.sql"))?
                .execute(params![name, owner, token])?;
            Ok(Answer::Done(deleted == 1))
        }
        // Noted by the thread (`intake`), never run in a transaction.
        Op::Unpark { .. } => Ok(Answer::Done(false)),
        Op::Sync(op) => super::sync::apply(conn, boot_id, op).map(Answer::Sync),
        Op::Status { name, prefix } => {
            inspect::status(conn, boot_id, name.as_deref(), prefix).map(Answer::Status)
        }
        Op::ForceRelease { name } => inspect::force_release(conn, boot_id, name)
            .map(|(removed, fence)| Answer::Forced { removed, fence }),
        Op::Flavour(op) => super::flavours::apply(conn, boot_id, op).map(Answer::Flavour),
    }
}

fn extend(
    conn: &Connection,
    name: &str,
    owner: &str,
    token: i64,
    expires: i64,
    boot_id: &str,
) -> rusqlite::Result<bool> {
    let updated = conn
        .prepare_cached(include_str!("sql/extend.sql"))?
        .execute(params![name, owner, expires, boot_id, token])?;
    Ok(updated == 1)
}

/// Opens the database file for the writer: WAL (a lasting setting of the file), no fsync per
/// commit, the busy timeout for writers that do not queue on the sidecar (earlier versions),
/// and the tables. Run while holding the writers' lock, so processes opening a new file at the
/// same moment do not race to switch it to WAL.
pub(super) fn open(path: &Path, busy_timeout: Duration) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(busy_timeout)?;
    // WAL: readers never wait for the writer. Needs an exclusive lock no busy handler waits
    // for, hence the retries below for writers of earlier versions that do not queue with us.
    let started = Instant::now();
    let mut nap = Duration::from_millis(2);
    loop {
        match conn
            .pragma_update_and_check(None, "journal_mode", "wal", |row| row.get::<_, String>(0))
        {
            Ok(_) => break,
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && started.elapsed() < busy_timeout =>
            {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(100));
            }
            Err(e) => return Err(e),
        }
    }
    // NORMAL: no fsync per commit in WAL mode. A power cut may lose the last commits; leases
    // end at reboot anyway and fencing tokens have a wall-clock floor.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch(include_str!("sql/schema.sql"))?;
    let records_holders = conn
        .prepare("SELECT 1 FROM pragma_table_info('distlock_locks') WHERE name = 'holder'")?
        .exists([])?;
    if !records_holders {
        conn.execute_batch(include_str!("sql/schema_holder.sql"))?;
    }
    conn.execute_batch(include_str!("sql/schema_sync.sql"))?;
    conn.execute_batch(include_str!("sql/schema_flavours.sql"))?;
    Ok(conn)
}
