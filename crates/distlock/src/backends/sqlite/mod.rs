//! The embedded SQLite backend: a lock table in one file, shared by every process on the
//! machine that opens it. No server. Its guarantees are below.
//!
//! # Layout
//!
//! * this file: [`SqliteBackend`], the methods of [`Backend`] and of every trait it adds
//!   (semaphores, elections, latches, inspection) as `writer::Op`s;
//! * `writer.rs`: the thread that owns the connection and runs the ops, several per
//!   transaction (group commit), each take one `BEGIN IMMEDIATE` transaction with its fencing
//!   token;
//! * `handover.rs`: a release hands the lock to a waiter of its client, in memory when it can,
//!   else in the release's transaction;
//! * `waiter.rs`: a waiter: takes, parks with the writer, wakes on a grant or a notice;
//! * `sidecar.rs`: the `PATH-distlock` file: its flock queues writers of all processes in the
//!   kernel, its release counters are bumped by every release;
//! * `notices.rs`: inotify on those counters, the waiters' notices;
//! * `sync.rs`: election records and count-down latches (ops of the same writer);
//! * `flavours.rs`: the fair lock, the read-write lock and the semaphore (ops of the same
//!   writer), and `flavour_waiter.rs`, their waiter;
//! * `inspect.rs`: status and forced release (ops of the same writer);
//! * `clock.rs`: CLOCK_BOOTTIME and the boot id that leases are judged by;
//! * `sql/`: the statements.
//!
#![doc = include_str!("docs.md")]

mod clock;
mod config;
mod flavour_waiter;
mod flavours;
mod handover;
mod inspect;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod notices;
mod sidecar;
mod sync;
mod waiter;
mod writer;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use self::flavours::{FlavourAnswer, FlavourOp, Side};
use self::sidecar::Sidecar;
use self::sync::{SyncAnswer, SyncOp};
use self::writer::{Answer, Failure, Op, Writer};
use crate::backend::{
    Attempt, Backend, Capabilities, ElectionEntry, ElectionWrite, Elections, Inspection, Kinds,
    Latches, LockRequest, PermitCount, Semaphores, Waiter, Wakeups,
};
use crate::backends::client_rules::flavour_rules::{self, Outcome};
use crate::error::{Error, ErrorKind, Result};
use crate::options::Options;
use crate::status::{ForcedRelease, Holding, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName};

pub use self::config::SqliteConfig;

const NAME: &str = "sqlite";

/// How long a writer queues behind another process's transaction before giving up, unless
/// [`Options::response_timeout`] says otherwise.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Locks in an SQLite file. Built by [`crate::connect`] from `sqlite:PATH`.
pub struct SqliteBackend {
    writer: Writer,
    path: PathBuf,
    /// `None` where inotify is missing: waiters then poll with the core's backoff.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    notices: Option<Arc<notices::Notices>>,
}

impl std::fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteBackend")
            .field("path", &self.path)
            .finish()
    }
}

fn err(what: &str) -> impl FnOnce(Failure) -> Error + '_ {
    move |failure| {
        let kind = match &failure {
            Failure::Sqlite(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                ) =>
            {
                ErrorKind::Connection
            }
            Failure::Sqlite(_) => ErrorKind::Backend,
            Failure::Io(_) | Failure::Busy(_) | Failure::Stopped => ErrorKind::Connection,
        };
        Error::new(kind, what.to_string())
            .with_backend(NAME)
            .with_source(failure)
    }
}

impl SqliteBackend {
    /// Opens (creating if needed) the file `url` names and its tables.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &Options::default()).await
    }

    /// [`connect`](Self::connect) with [`Options`]: `response_timeout` is how long a take,
    /// extend or release waits for other processes' writes.
    pub async fn connect_with(url: &str, options: &Options) -> Result<Self> {
        Self::connect_config(SqliteConfig::from_url(url)?, options).await
    }

    /// Opens (creating if needed) the file `config` names and its tables: no URL. The
    /// configuration's `busy_timeout`, if set, wins over `options.response_timeout`.
    pub async fn connect_config(config: SqliteConfig, options: &Options) -> Result<Self> {
        let busy_timeout = config
            .busy_timeout
            .or(options.response_timeout)
            .unwrap_or(BUSY_TIMEOUT);
        let path = config.path;
        if path.as_os_str().is_empty() || path.as_os_str() == ":memory:" {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "SqliteConfig needs a file path (processes share the locks through the file), \
                 e.g. SqliteConfig::new(\"./distlock.db\")",
            )
            .with_backend(NAME));
        }
        let opening = path.clone();
        let (sidecar, conn) = tokio::task::spawn_blocking(move || {
            let sidecar = Sidecar::open(&opening)?;
            // Under the writers' lock: processes opening a new file at once take turns to
            // switch it to WAL and create the tables.
            let turn = sidecar.lock_writers()?;
            let conn = writer::open(&opening, busy_timeout)?;
            drop(turn);
            Ok::<_, Failure>((Arc::new(sidecar), conn))
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Backend, format!("opening the file: {e}")))?
        .map_err(err(&format!("opening {}", path.display())))?;
        let writer = Writer::start(conn, sidecar.clone(), clock::boot_id(), busy_timeout)
            .map_err(|e| err("starting the writer thread")(Failure::Io(e)))?;
        Ok(SqliteBackend {
            writer,
            path,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            notices: notices::Notices::start(sidecar)
                .inspect_err(|e| tracing::debug!("no release notices, waiters will poll: {e}"))
                .ok()
                .map(Arc::new),
        })
    }
}

/// One take: the lock, or the lease its holder has left.
async fn take(writer: &Writer, req: &LockRequest) -> Result<Attempt> {
    let op = Op::Take {
        name: req.name.as_str().to_string(),
        owner: req.owner.as_str().to_string(),
        lease_ms: req.lease.as_millis() as i64,
    };
    match writer.run(op).await.map_err(err("taking the lock"))? {
        Answer::Taken(token) => Ok(Attempt::leased(FencingToken(token as u64), req)),
        Answer::Held(left) => Ok(Attempt::Held {
            retry_after: Some(left),
        }),
        other => Err(Error::new(
            ErrorKind::Backend,
            format!("taking the lock: unexpected answer {other:?}"),
        )
        .with_backend(NAME)),
    }
}

/// Runs a fair-lock, read-write lock or semaphore step.
async fn flavour_run(writer: &Writer, op: FlavourOp, what: &str) -> Result<FlavourAnswer> {
    match writer.run(Op::Flavour(op)).await.map_err(err(what))? {
        Answer::Flavour(answer) => Ok(answer),
        other => Err(Error::new(
            ErrorKind::Backend,
            format!("{what}: unexpected answer {other:?}"),
        )
        .with_backend(NAME)),
    }
}

/// The take of `req`'s side; `queue`: a blocked waiter keeps (or takes) its place in line.
fn take_op(req: &LockRequest, side: Side, queue: bool) -> FlavourOp {
    FlavourOp::Take {
        side,
        name: req.name.as_str().to_string(),
        owner: req.owner.as_str().to_string(),
        lease_ms: req.lease.as_millis() as i64,
        queue,
        permits: flavour_rules::asked_permits(req),
        follows_resize: req.follows_resize,
    }
}

/// The attempt a take's answer stands for.
fn take_answer(answer: FlavourAnswer, req: &LockRequest) -> Result<Attempt> {
    let outcome = match answer {
        FlavourAnswer::Taken(token) => Outcome::Taken(token),
        FlavourAnswer::Held { left_ms, .. } => Outcome::Held(left_ms),
        FlavourAnswer::SizeDiffers(kept) => Outcome::SizeDiffers(kept),
        FlavourAnswer::Upgrade => Outcome::Upgrade,
        other => {
            return Err(Error::new(
                ErrorKind::Backend,
                format!("taking the lock: unexpected answer {other:?}"),
            )
            .with_backend(NAME));
        }
    };
    flavour_rules::attempt(NAME, outcome, req)
}

/// The side of `kind`, or the error for a kind this backend does not know.
fn side_of(kind: LockKind) -> Result<Side> {
    Side::of(kind).ok_or_else(|| Error::unsupported(NAME, kind))
}

impl SqliteBackend {
    /// Runs an election or latch step.
    async fn sync(&self, op: SyncOp, what: &str) -> Result<SyncAnswer> {
        match self.writer.run(Op::Sync(op)).await.map_err(err(what))? {
            Answer::Sync(answer) => Ok(answer),
            other => Err(Error::new(
                ErrorKind::Backend,
                format!("{what}: unexpected answer {other:?}"),
            )
            .with_backend(NAME)),
        }
    }

    /// Notices on the sidecar counter `slot` (never, without inotify: the core polls).
    fn watch_slot(&self, slot: usize) -> Result<Wakeups> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(notices) = &self.notices {
            return notices
                .watch(slot)
                .map_err(|e| err("listening for changes")(Failure::Io(e)));
        }
        let _ = slot;
        Ok(Box::pin(futures_util::stream::pending()))
    }
}

fn unexpected(what: &str, answer: SyncAnswer) -> Error {
    Error::new(
        ErrorKind::Backend,
        format!("{what}: unexpected answer {answer:?}"),
    )
    .with_backend(NAME)
}

/// Frees the owner's holding (the one with `token`, when given), or hands it to a waiter of
/// this client in memory (`handover.rs`).
async fn release(writer: &Writer, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
    let token_number = token.map(|t| t.get() as i64);
    if writer.hand_over(req.name.as_str(), req.owner.as_str(), token_number) {
        return Ok(true);
    }
    let op = Op::Release {
        name: req.name.as_str().to_string(),
        owner: req.owner.as_str().to_string(),
        token: token_number,
    };
    let done = writer.run(op).await.map_err(err("freeing the lock"))?;
    Ok(matches!(done, Answer::Done(true)))
}

#[async_trait]
impl Backend for SqliteBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if self.notices.is_some() {
            return Capabilities::leases()
                .notifying()
                .handing_over()
                .keeping(Kinds::ALL);
        }
        Capabilities::leases().handing_over().keeping(Kinds::ALL)
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        if req.kind == LockKind::Mutex {
            return take(&self.writer, req).await;
        }
        // A one-off attempt never joins a queue (the waiter does).
        let op = take_op(req, side_of(req.kind)?, false);
        take_answer(flavour_run(&self.writer, op, "taking the lock").await?, req)
    }

    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<Option<Duration>> {
        if req.kind != LockKind::Mutex {
            let op = FlavourOp::Extend {
                side: side_of(req.kind)?,
                name: req.name.as_str().to_string(),
                owner: req.owner.as_str().to_string(),
                token: token.get() as i64,
                lease_ms: req.lease.as_millis() as i64,
            };
            let answer = flavour_run(&self.writer, op, "extending the lease").await?;
            return Ok(matches!(answer, FlavourAnswer::Done { found: true, .. })
                .then(|| req.lease.duration()));
        }
        let op = Op::Extend {
            name: req.name.as_str().to_string(),
            owner: req.owner.as_str().to_string(),
            token: token.get() as i64,
            lease_ms: req.lease.as_millis() as i64,
        };
        let done = self
            .writer
            .run(op)
            .await
            .map_err(err("extending the lease"))?;
        Ok(matches!(done, Answer::Done(true)).then(|| req.lease.duration()))
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        if req.kind == LockKind::Mutex {
            return release(&self.writer, req, token).await;
        }
        let op = FlavourOp::Release {
            side: side_of(req.kind)?,
            name: req.name.as_str().to_string(),
            owner: req.owner.as_str().to_string(),
            token: token.map(|t| t.get() as i64),
        };
        let answer = flavour_run(&self.writer, op, "freeing the lock").await?;
        Ok(matches!(answer, FlavourAnswer::Done { found: true, .. }))
    }

    async fn watch_free(&self, req: &LockRequest) -> Result<Wakeups> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(notices) = &self.notices {
            return notices
                .watch(sidecar::slot_of(req.name.as_str()))
                .map_err(|e| err("listening for releases")(Failure::Io(e)));
        }
        let _ = req;
        Ok(Box::pin(futures_util::stream::pending()))
    }

    fn waiter(&self, req: &LockRequest) -> Option<Box<dyn Waiter>> {
        if let Some(side) = Side::of(req.kind) {
            return Some(Box::new(flavour_waiter::FlavourWaiter::new(
                self.writer.clone(),
                #[cfg(any(target_os = "linux", target_os = "android"))]
                self.notices.clone(),
                req.clone(),
                side,
            )));
        }
        Some(Box::new(waiter::SqliteWaiter::new(
            self.writer.clone(),
            #[cfg(any(target_os = "linux", target_os = "android"))]
            self.notices.clone(),
            req.clone(),
        )))
    }

    crate::backend::offers!(semaphores, elections, latches, inspection);
}

#[async_trait]
impl Semaphores for SqliteBackend {
    async fn count_permits(&self, req: &LockRequest) -> Result<PermitCount> {
        let op = FlavourOp::Count {
            name: req.name.as_str().to_string(),
        };
        match flavour_run(&self.writer, op, "counting permits").await? {
            FlavourAnswer::Permits { size, held } => Ok(PermitCount {
                size: size.map(|size| u32::try_from(size).unwrap_or(u32::MAX)),
                taken: u32::try_from(held).unwrap_or(u32::MAX),
            }),
            other => Err(Error::new(
                ErrorKind::Backend,
                format!("counting permits: unexpected answer {other:?}"),
            )
            .with_backend(NAME)),
        }
    }

    async fn set_permits(&self, name: &LockName, permits: u32) -> Result<Option<u32>> {
        let op = FlavourOp::SetPermits {
            name: name.as_str().to_string(),
            permits,
        };
        match flavour_run(&self.writer, op, "changing a semaphore's size").await? {
            FlavourAnswer::Resized(had) => Ok(had.and_then(|had| u32::try_from(had).ok())),
            other => Err(Error::new(
                ErrorKind::Backend,
                format!("changing a semaphore's size: unexpected answer {other:?}"),
            )
            .with_backend(NAME)),
        }
    }
}

#[async_trait]
impl Elections for SqliteBackend {
    async fn elect_write(&self, write: ElectionWrite<'_>) -> Result<bool> {
        let op = SyncOp::ElectWrite {
            name: write.election.as_str().to_string(),
            term: write.term.get() as i64,
            value: write.value.map(str::to_string),
            ttl_ms: write.ttl.as_millis() as i64,
        };
        match self.sync(op, "writing the election record").await? {
            SyncAnswer::Written { accepted, .. } => Ok(accepted),
            other => Err(unexpected("writing the election record", other)),
        }
    }

    async fn elect_current(&self, election: &LockName) -> Result<Option<ElectionEntry>> {
        let op = SyncOp::ElectCurrent {
            name: election.as_str().to_string(),
        };
        match self.sync(op, "reading the election record").await? {
            SyncAnswer::Entries(mut entries) => Ok(entries.pop()),
            other => Err(unexpected("reading the election record", other)),
        }
    }

    async fn elect_log(
        &self,
        election: &LockName,
        after: Option<u64>,
    ) -> Result<Vec<ElectionEntry>> {
        let op = SyncOp::ElectLog {
            name: election.as_str().to_string(),
            after: after.map(|a| a as i64),
        };
        match self.sync(op, "reading the election log").await? {
            SyncAnswer::Entries(entries) => Ok(entries),
            other => Err(unexpected("reading the election log", other)),
        }
    }

    async fn watch_election(&self, election: &LockName) -> Result<Wakeups> {
        self.watch_slot(sync::election_slot(election.as_str()))
    }
}

#[async_trait]
impl Latches for SqliteBackend {
    async fn latch_set(&self, latch: &LockName, count: u64) -> Result<bool> {
        let op = SyncOp::LatchSet {
            name: latch.as_str().to_string(),
            count: count as i64,
        };
        match self.sync(op, "setting the latch").await? {
            SyncAnswer::Written { accepted, .. } => Ok(accepted),
            other => Err(unexpected("setting the latch", other)),
        }
    }

    async fn latch_count_down(&self, latch: &LockName) -> Result<u64> {
        let op = SyncOp::LatchDown {
            name: latch.as_str().to_string(),
        };
        match self.sync(op, "counting the latch down").await? {
            SyncAnswer::Count { count, .. } => Ok(count),
            other => Err(unexpected("counting the latch down", other)),
        }
    }

    async fn latch_count(&self, latch: &LockName) -> Result<u64> {
        let op = SyncOp::LatchCount {
            name: latch.as_str().to_string(),
        };
        match self.sync(op, "reading the latch").await? {
            SyncAnswer::Count { count, .. } => Ok(count),
            other => Err(unexpected("reading the latch", other)),
        }
    }

    async fn watch_latch(&self, latch: &LockName) -> Result<Wakeups> {
        self.watch_slot(sync::latch_slot(latch.as_str()))
    }
}

#[async_trait]
impl Inspection for SqliteBackend {
    async fn status(&self, which: &Selection) -> Result<Vec<LockStatus>> {
        let (name, prefix) = match which {
            Selection::Name(name) => (Some(name.as_str().to_string()), String::new()),
            Selection::Prefix(prefix) => (None, prefix.clone()),
            #[allow(unreachable_patterns)]
            _ => return Err(Error::unsupported(NAME, "this selection")),
        };
        let op = Op::Status {
            name: name.clone(),
            prefix: prefix.clone(),
        };
        let mut found = match self
            .writer
            .run(op)
            .await
            .map_err(err("reading the locks"))?
        {
            Answer::Status(rows) => rows
                .into_iter()
                .map(|row| {
                    let mut status = LockStatus::new(row.name, LockKind::Mutex);
                    status.last_token = row.last_token.map(|t| FencingToken(t as u64));
                    status.holdings.push(
                        Holding::new(FencingToken(row.token as u64))
                            .holder_record(row.holder.as_deref())
                            .since_unix_ms(row.since_ms)
                            .lease_left_ms(row.lease_left_ms),
                    );
                    status
                })
                .collect::<Vec<_>>(),
            other => {
                return Err(Error::new(
                    ErrorKind::Backend,
                    format!("reading the locks: unexpected answer {other:?}"),
                )
                .with_backend(NAME));
            }
        };
        let op = FlavourOp::Status { name, prefix };
        match flavour_run(&self.writer, op, "reading the locks").await? {
            FlavourAnswer::Status {
                holdings,
                sizes,
                waiters,
            } => {
                let shown = holdings
                    .into_iter()
                    .map(|(side, row)| flavour_rules::Shown {
                        side,
                        name: row.name.clone(),
                        last_token: row.last_token,
                        permits: sizes
                            .iter()
                            .find(|(name, _)| *name == row.name)
                            .map_or(0, |(_, size)| u32::try_from(*size).unwrap_or(0)),
                        holding: holding_of(row),
                    })
                    .collect();
                found.extend(flavour_rules::statuses(shown, waiters))
            }
            other => {
                return Err(Error::new(
                    ErrorKind::Backend,
                    format!("reading the locks: unexpected answer {other:?}"),
                )
                .with_backend(NAME));
            }
        }
        found.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(found)
    }

    async fn force_release(&self, name: &LockName, kind: LockKind) -> Result<ForcedRelease> {
        if kind != LockKind::Mutex {
            let op = FlavourOp::Force {
                side: side_of(kind)?,
                name: name.as_str().to_string(),
            };
            return match flavour_run(&self.writer, op, "releasing the lock by force").await? {
                FlavourAnswer::Forced { removed, fence } => Ok(ForcedRelease::new(
                    removed.into_iter().map(holding_of).collect(),
                    FencingToken(fence as u64),
                )),
                other => Err(Error::new(
                    ErrorKind::Backend,
                    format!("releasing the lock by force: unexpected answer {other:?}"),
                )
                .with_backend(NAME)),
            };
        }
        let op = Op::ForceRelease {
            name: name.as_str().to_string(),
        };
        match self
            .writer
            .run(op)
            .await
            .map_err(err("releasing the lock by force"))?
        {
            Answer::Forced { removed, fence } => Ok(ForcedRelease::new(
                removed
                    .into_iter()
                    .map(|row| {
                        Holding::new(FencingToken(row.token as u64))
                            .holder_record(row.holder.as_deref())
                            .since_unix_ms(row.since_ms)
                            .lease_left_ms(row.lease_left_ms)
                    })
                    .collect(),
                FencingToken(fence as u64),
            )),
            other => Err(Error::new(
                ErrorKind::Backend,
                format!("releasing the lock by force: unexpected answer {other:?}"),
            )
            .with_backend(NAME)),
        }
    }
}

/// A holding as status and forced release show it.
fn holding_of(row: inspect::Row) -> Holding {
    Holding::new(FencingToken(row.token as u64))
        .holder_record(row.holder.as_deref())
        .since_unix_ms(row.since_ms)
        .lease_left_ms(row.lease_left_ms)
}
