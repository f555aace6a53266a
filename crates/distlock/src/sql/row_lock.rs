//! The row lock held by the caller's own transaction: the sources' fix for the "lock released
//! before commit" bug.
//!
//! [`RowLock::lock_row`] opens a transaction, locks the name's row in `distlock_row_locks` with
//! `SELECT … FOR UPDATE`, and hands the transaction over. The caller makes its protected writes
//! in that same transaction and commits: the commit that makes the writes visible is the moment
//! the lock is released, so the next holder always reads them. Dropping the [`RowLockTx`]
//! without committing rolls back, which also releases the lock.
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn demo(pool: sqlx::PgPool) -> distlock::Result<()> {
//! // Not run by the doctests: it needs a PostgreSQL server.
//! use distlock::sql::RowLock;
//!
//! let mut tx = pool.lock_row("product:42").await?;
//! sqlx::query("UPDATE product SET stock = stock - 1 WHERE id = 42 AND stock > 0")
//!     .execute(&mut *tx)
//!     .await
//!     .expect("the protected write");
//! tx.commit().await?; // the write and the release, in one step
//! # Ok(()) }
//! ```
//!
//! What this lock is and is not: it lives exactly as long as a transaction, on one database —
//! no lease, no watchdog, no fencing token (the database's own transaction isolation does that
//! job). A holder that crashes or loses its connection rolls back and frees the lock at once.
//! Waiting is the database's: PostgreSQL waits without limit unless `lock_timeout` is set;
//! InnoDB gives up after `innodb_lock_wait_timeout` (50 s by default).

use std::ops::{Deref, DerefMut};

use async_trait::async_trait;

use crate::error::{Error, ErrorKind, Result};
use crate::sqlx_support::error::from_sqlx;
use crate::types::LockName;

/// A transaction holding the row lock of one name. Use it (`&mut *tx`) as the executor of the
/// protected writes, then [`commit`](RowLockTx::commit).
#[must_use = "dropping it rolls back (and releases the lock) at once"]
pub struct RowLockTx<DB: sqlx::Database> {
    tx: sqlx::Transaction<'static, DB>,
    name: LockName,
    backend: &'static str,
}

impl<DB: sqlx::Database> RowLockTx<DB> {
    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// Commits the caller's writes and releases the lock, in one step.
    pub async fn commit(self) -> Result<()> {
        self.tx
            .commit()
            .await
            .map_err(|e| from_sqlx(self.backend, "committing the row-lock transaction", e))
    }

    /// Discards the caller's writes and releases the lock.
    pub async fn rollback(self) -> Result<()> {
        self.tx
            .rollback()
            .await
            .map_err(|e| from_sqlx(self.backend, "rolling back the row-lock transaction", e))
    }
}

impl<DB: sqlx::Database> Deref for RowLockTx<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        &self.tx
    }
}

impl<DB: sqlx::Database> DerefMut for RowLockTx<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.tx
    }
}

impl<DB: sqlx::Database> std::fmt::Debug for RowLockTx<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowLockTx")
            .field("name", &self.name)
            .finish()
    }
}

/// Row locks on a connection pool (`PgPool`, `MySqlPool`). The lock table is created on first use
/// if missing.
#[async_trait]
pub trait RowLock {
    /// The database of the pool.
    type Database: sqlx::Database;

    /// Opens a transaction and locks the row of `name` in it, waiting for the current holder's
    /// transaction to end.
    ///
    /// # Cancel Safety
    ///
    /// Dropping the future rolls the transaction back: no lock is left behind.
    async fn lock_row(&self, name: &str) -> Result<RowLockTx<Self::Database>>;

    /// As [`lock_row`](RowLock::lock_row), but `Ok(None)` at once if another transaction holds
    /// the row (`FOR UPDATE NOWAIT`).
    async fn try_lock_row(&self, name: &str) -> Result<Option<RowLockTx<Self::Database>>>;
}

/// The row-lock statements of one database (`sql/row_lock/<database>/*.sql`).
#[derive(Clone, Copy)]
struct RowLockStatements {
    /// Locks the name's row in the caller's transaction, waiting.
    lock: &'static str,
    /// The same, refusing at once when another transaction holds the row.
    lock_nowait: &'static str,
    /// Creates the name's row if missing.
    create: &'static str,
    /// Creates the lock table if missing.
    schema: &'static str,
}

/// One implementation per database, differing only in SQL, binding and error codes.
macro_rules! row_lock_for {
    (
        module = $module:ident,
        feature = $feature:literal,
        pool = $pool:ty,
        db = $db:ty,
        backend = $backend:literal,
        bind = |$n:ident| $bind:expr,
        busy = $busy:expr,
        missing_table = $missing:expr,
    ) => {
        #[cfg(feature = $feature)]
        mod $module {
            use super::*;

            /// The statements in `row_lock/<backend>/`.
            const STATEMENTS: RowLockStatements = RowLockStatements {
                lock: include_str!(concat!("row_lock/", $backend, "/lock.sql")),
                lock_nowait: include_str!(concat!("row_lock/", $backend, "/lock_nowait.sql")),
                create: include_str!(concat!("row_lock/", $backend, "/create.sql")),
                schema: include_str!(concat!("row_lock/", $backend, "/schema.sql")),
            };

            fn is(e: &sqlx::Error, test: fn(&dyn sqlx::error::DatabaseError) -> bool) -> bool {
                matches!(e, sqlx::Error::Database(db) if test(&**db))
            }

            #[async_trait]
            impl RowLock for $pool {
                type Database = $db;

                async fn lock_row(&self, name: &str) -> Result<RowLockTx<$db>> {
                    lock(self, name, false).await?.ok_or_else(|| {
                        Error::new(ErrorKind::Backend, "the row lock was refused")
                            .with_backend($backend)
                    })
                }

                async fn try_lock_row(&self, name: &str) -> Result<Option<RowLockTx<$db>>> {
                    lock(self, name, true).await
                }
            }

            async fn create(pool: &$pool, $n: &LockName) -> Result<()> {
                let insert = || {
                    sqlx::query(STATEMENTS.create)
                    .bind($bind)
                    .execute(pool)
                };
                match insert().await {
                    Ok(_) => Ok(()),
                    Err(e) if is(&e, $missing) => {
                        sqlx::raw_sql(STATEMENTS.schema)
                        .execute(pool)
                        .await
                        .map_err(|e| from_sqlx($backend, "creating the row-lock table", e))?;
                        insert()
                            .await
                            .map(|_| ())
                            .map_err(|e| from_sqlx($backend, "creating the lock row", e))
                    }
                    Err(e) => Err(from_sqlx($backend, "creating the lock row", e)),
                }
            }

            async fn lock(
                pool: &$pool,
                name: &str,
                nowait: bool,
            ) -> Result<Option<RowLockTx<$db>>> {
                let $n = &LockName::new(name)?;
                let sql = if nowait {
                    STATEMENTS.lock_nowait
                } else {
                    STATEMENTS.lock
                };
                // At most twice: the second time the row exists.
                for _ in 0..2 {
                    let mut tx = crate::sqlx_support::tx::begin(pool).await.map_err(|e| {
                        from_sqlx($backend, "starting the row-lock transaction", e)
                    })?;
                    match sqlx::query(sql).bind($bind).fetch_optional(&mut *tx).await {
                        Ok(Some(_)) => {
                            return Ok(Some(RowLockTx {
                                tx,
                                name: $n.clone(),
                                backend: $backend,
                            }));
                        }
                        Err(e) if nowait && is(&e, $busy) => return Ok(None),
                        Ok(None) => {}
                        Err(e) if is(&e, $missing) => {}
                        Err(e) => return Err(from_sqlx($backend, "locking the row", e)),
                    }
                    drop(tx);
                    create(pool, $n).await?;
                }
                Err(
                    Error::new(ErrorKind::Backend, format!("the lock row of {name:?} vanished"))
                        .with_backend($backend),
                )
            }
        }
    };
}

row_lock_for! {
    module = postgres,
    feature = "postgres",
    pool = sqlx::PgPool,
    db = sqlx::Postgres,
    backend = "postgres",
    bind = |n| n.as_str(),
    busy = |e| e.code().as_deref() == Some("55P03"),
    missing_table = |e| e.code().as_deref() == Some("42P01"),
}

row_lock_for! {
    module = mysql,
    feature = "mysql",
    pool = sqlx::MySqlPool,
    db = sqlx::MySql,
    backend = "mysql",
    bind = |n| n.as_str().as_bytes(),
    // MariaDB answers NOWAIT with 1205 (lock wait timeout), MySQL with 3572.
    busy = |e| mysql_number(e).is_some_and(|n| n == 1205 || n == 3572),
    missing_table = |e| mysql_number(e) == Some(1146),
}

#[cfg(feature = "mysql")]
fn mysql_number(e: &dyn sqlx::error::DatabaseError) -> Option<u16> {
    e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .map(|e| e.number())
}
