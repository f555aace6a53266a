//! The embedded SQLite backend: a lock table in one file, shared by every process on the
//! machine that opens it. No server. Its guarantees are below.
//!
//! Every take is one `BEGIN IMMEDIATE` transaction (the write lock is taken up front, so two
//! processes never both read "free" and both write); every extend and release is one statement.
//! WAL mode lets readers proceed during a write; a busy timeout makes writers queue instead of
//! failing.
//!
#![doc = include_str!("docs.md")]

mod clock;

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::backend::{Attempt, Backend, Capabilities, LockRequest};
use crate::backends::sqlx_error::from_sqlx;
use crate::error::{Error, Result};
use crate::options::Options;
use crate::types::FencingToken;

const NAME: &str = "sqlite";

/// How long a writer queues behind another process's transaction before giving up, unless
/// [`Options::response_timeout`] says otherwise.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Locks in an SQLite file. Built by [`crate::connect`] from `sqlite:PATH`.
pub struct SqliteBackend {
    pool: SqlitePool,
    path: PathBuf,
    boot_id: String,
}

impl std::fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteBackend")
            .field("path", &self.path)
            .finish()
    }
}

fn err(what: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
    move |e| from_sqlx(NAME, what, e)
}

impl SqliteBackend {
    /// Opens (creating if needed) the file `url` names and its tables.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &Options::default()).await
    }

    /// [`connect`](Self::connect) with [`Options`]: `response_timeout` is how long a writer
    /// waits for another process's write lock.
    pub async fn connect_with(url: &str, options: &Options) -> Result<Self> {
        let busy_timeout = options.response_timeout.unwrap_or(BUSY_TIMEOUT);
        let path = crate::url::sqlite_path(url)?;
        let options = SqliteConnectOptions::from_str("sqlite://")
            .map_err(err("building connect options"))?
            .filename(&path)
            .create_if_missing(true)
            // NORMAL: no fsync per commit in WAL mode. A power cut may lose the last commits;
            // leases end at reboot anyway and fencing tokens have a wall-clock floor.
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(busy_timeout);
        // Processes opening a new file at the same moment race to switch it to WAL and create
        // the tables; the loser sees SQLITE_BUSY outside any busy handler. Retry until the busy
        // timeout, like a writer would wait.
        let started = std::time::Instant::now();
        let mut nap = Duration::from_millis(2);
        loop {
            match Self::prepare(&path, options.clone()).await {
                Ok(()) => break,
                Err(e) if e.is_retryable() && started.elapsed() < busy_timeout => {
                    tokio::time::sleep(nap).await;
                    nap = (nap * 2).min(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
        // The file is in WAL mode for good now; pool connections need not switch it again.
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(|e| from_sqlx(NAME, &format!("opening {}", path.display()), e))?;
        Ok(SqliteBackend {
            pool,
            path,
            boot_id: clock::boot_id(),
        })
    }

    /// Switches the file to WAL (a lasting setting, which needs an exclusive lock no busy
    /// handler waits for) and creates the tables, on one connection of its own.
    async fn prepare(path: &std::path::Path, options: SqliteConnectOptions) -> Result<()> {
        use sqlx::{ConnectOptions, Connection};
        let mut conn = options
            .journal_mode(SqliteJournalMode::Wal)
            .connect()
            .await
            .map_err(|e| from_sqlx(NAME, &format!("opening {}", path.display()), e))?;
        sqlx::raw_sql(include_str!("sql/schema.sql"))
            .execute(&mut conn)
            .await
            .map_err(err("creating the lock tables"))?;
        conn.close()
            .await
            .map_err(err("closing the setup connection"))
    }

    /// How long the lease of another owner has left, read without a write lock; `None` when
    /// the lock looks free, expired or ours (the write transaction then decides).
    async fn held_by_other(&self, req: &LockRequest) -> Result<Option<Duration>> {
        let row = sqlx::query(include_str!("sql/select_lock.sql"))
            .bind(req.name.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(err("reading the lock"))?;
        let now = clock::boottime_ms();
        Ok(row.and_then(|row| {
            let expires = row.get::<i64, _>("expires_ms");
            let live = row.get::<String, _>("boot_id") == self.boot_id && expires > now;
            (live && row.get::<String, _>("owner") != req.owner.as_str())
                .then(|| Duration::from_millis((expires - now) as u64))
        }))
    }

    async fn begin(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        self.pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(err("starting a write transaction"))
    }
}

#[async_trait]
impl Backend for SqliteBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leases()
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        let name = req.name.as_str();
        let owner = req.owner.as_str();
        // A held lock is the common answer under contention: see it with a plain read (WAL
        // readers never wait for the writer) instead of queueing for the write lock, so
        // waiters polling from other processes do not slow the holder's release.
        if let Some(left) = self.held_by_other(req).await? {
            return Ok(Attempt::Held {
                retry_after: Some(left),
            });
        }
        let mut tx = self.begin().await?;
        let now = clock::boottime_ms();
        let expires = now + req.lease.as_millis() as i64;
        let row = sqlx::query(include_str!("sql/select_lock.sql"))
            .bind(name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(err("reading the lock"))?;
        if let Some(row) = &row {
            let live = row.get::<String, _>("boot_id") == self.boot_id
                && row.get::<i64, _>("expires_ms") > now;
            if live && row.get::<String, _>("owner") != owner {
                let left = row.get::<i64, _>("expires_ms") - now;
                tx.rollback().await.map_err(err("ending the transaction"))?;
                return Ok(Attempt::Held {
                    retry_after: Some(Duration::from_millis(left as u64)),
                });
            }
            if live {
                // Our own live holding: restart its lease and answer its token.
                let token = row.get::<i64, _>("token");
                sqlx::query(include_str!("sql/extend.sql"))
                    .bind(name)
                    .bind(owner)
                    .bind(expires)
                    .bind(&self.boot_id)
                    .bind(token)
                    .execute(&mut *tx)
                    .await
                    .map_err(err("restarting the lease"))?;
                tx.commit().await.map_err(err("committing"))?;
                return Ok(Attempt::leased(FencingToken(token as u64), req));
            }
        }
        let token: i64 = sqlx::query(include_str!("sql/next_token.sql"))
            .bind(name)
            .bind(clock::wall_us())
            .fetch_one(&mut *tx)
            .await
            .map_err(err("bumping the fencing counter"))?
            .get(0);
        sqlx::query(include_str!("sql/take.sql"))
            .bind(name)
            .bind(owner)
            .bind(token)
            .bind(&self.boot_id)
            .bind(expires)
            .execute(&mut *tx)
            .await
            .map_err(err("taking the lock"))?;
        tx.commit().await.map_err(err("committing"))?;
        Ok(Attempt::leased(FencingToken(token as u64), req))
    }

    // Extend and release are one statement each: its own implicit transaction takes the write
    // lock for exactly that statement.
    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<Option<Duration>> {
        let expires = clock::boottime_ms() + req.lease.as_millis() as i64;
        let done = sqlx::query(include_str!("sql/extend.sql"))
            .bind(req.name.as_str())
            .bind(req.owner.as_str())
            .bind(expires)
            .bind(&self.boot_id)
            .bind(token.get() as i64)
            .execute(&self.pool)
            .await
            .map_err(err("extending the lease"))?;
        Ok((done.rows_affected() == 1).then(|| req.lease.duration()))
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        let deleted = sqlx::query(include_str!("sql/delete.sql"))
            .bind(req.name.as_str())
            .bind(req.owner.as_str())
            .bind(token.map(|t| t.get() as i64))
            .execute(&self.pool)
            .await
            .map_err(err("freeing the lock"))?;
        Ok(deleted.rows_affected() == 1)
    }
}
