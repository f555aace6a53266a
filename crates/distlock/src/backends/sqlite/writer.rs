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

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tokio::sync::oneshot;

use super::clock;
use super::sidecar::{Sidecar, WritersLock, slot_of};

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
}

/// What an [`Op`] did.
#[derive(Debug)]
pub(super) enum Answer {
    /// The lock is the caller's, with this fencing token.
    Taken(i64),
    /// Another owner holds it, for this long still.
    Held(Duration),
    /// Whether the extend or release found the holding.
    Done(bool),
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

/// The caller's side of the writer thread. The thread ends when this is dropped.
#[derive(Debug)]
pub(super) struct Writer {
    jobs: mpsc::Sender<Job>,
    busy_timeout: Duration,
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
        let thread = WriterThread {
            conn,
            sidecar,
            boot_id,
            busy_timeout,
        };
        std::thread::Builder::new()
            .name("distlock-sqlite".into())
            .spawn(move || thread.run(queue))?;
        Ok(Writer { jobs, busy_timeout })
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
}

impl WriterThread {
    fn run(mut self, queue: mpsc::Receiver<Job>) {
        let sidecar = self.sidecar.clone();
        while let Ok(first) = queue.recv() {
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
                batch.push(job);
            }
            let answered = self.run_batch(&turn, batch);
            // The flock goes before anyone hears back: a caller may run on at once and its
            // process be stopped (a GC pause, SIGSTOP) right after taking a lock, and a stopped
            // process must not keep every other process's writer waiting (it held up a whole
            // pause scenario of the demo for the length of the stop when this thread was slow
            // to get back to the unlock after answering).
            drop(turn);
            for (job, answer) in answered {
                let _ = job.answer.send(answer);
            }
        }
    }

    /// Runs `batch` and tells waiters of the locks it freed; the answers go out after the
    /// writers' lock is given back.
    fn run_batch(
        &mut self,
        turn: &WritersLock<'_>,
        batch: Vec<Job>,
    ) -> Vec<(Job, Result<Answer, Failure>)> {
        // Skip ops nobody waits for any more: their callers already reported a failure.
        let batch: Vec<Job> = batch
            .into_iter()
            .filter(|job| !job.answer.is_closed() && job.queued.elapsed() < self.busy_timeout)
            .collect();
        if batch.is_empty() {
            return Vec::new();
        }
        let ops: Vec<&Op> = batch.iter().map(|job| &job.op).collect();
        let answers = match self.transaction(&ops) {
            Ok(answers) => answers.into_iter().map(Ok).collect(),
            Err(_) if batch.len() > 1 => ops
                .iter()
                .map(|op| self.transaction(&[op]).map(|mut one| one.remove(0)))
                .collect(),
            Err(failure) => vec![Err(failure)],
        };
        let answered: Vec<(Job, Result<Answer, Failure>)> =
            batch.into_iter().zip(answers).collect();
        // After the commit, so a woken waiter finds the lock free.
        for (job, answer) in &answered {
            if let (Op::Release { name, .. }, Ok(Answer::Done(true))) = (&job.op, answer)
                && let Err(e) = turn.bump(slot_of(name))
            {
                tracing::debug!("release notice not written, waiters fall back on timers: {e}");
            }
        }
        answered
    }

    /// Runs `ops` in one write transaction: all of them commit, or none.
    fn transaction(&mut self, ops: &[&Op]) -> Result<Vec<Answer>, Failure> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut answers = Vec::with_capacity(ops.len());
        for op in ops {
            answers.push(apply(&tx, &self.boot_id, op)?);
        }
        tx.commit()?;
        Ok(answers)
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
                return Ok(Answer::Taken(token));
            }
            let token: i64 = conn
                .prepare_cached(include_str!("sql/next_token.sql"))?
                .query_row(params![name, clock::wall_us()], |row| row.get(0))?;
            conn.prepare_cached(include_str!("sql/take.sql"))?
                .execute(params![name, owner, token, boot_id, expires])?;
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
    Ok(conn)
}
